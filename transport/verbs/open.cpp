// verbs:// in the transport factory (transport/registry.hpp): HOST:PORT entries where each
// machine trades its RDMA address over UDP, one UD queue pair per machine. Registered in every
// build, so that a build without rdma-core names what is missing.
#include <algorithm>
#include <chrono>
#include <thread>

#include "base/common.hpp"
#include "transport/open_backend.hpp"
#ifdef HOGSTREAM_VERBS
#include "transport/verbs/endpoint.hpp"
#include "transport/verbs/exchange.hpp"
#endif

namespace hogstream {

namespace {

#ifdef HOGSTREAM_VERBS
// The settings of an end on `where` = DEVICE[:PORT] ("" = the first device, port 1).
VerbsOptions VerbsFor(const std::string& where, const OpenOptions& o) {
  VerbsOptions v;
  const size_t colon = where.rfind(':');
  v.device = where.substr(0, colon);
  if (colon != std::string::npos) {
    const int port = ParsePort(where.substr(colon + 1));
    HS_REQUIRE(port > 0 && port < 256) << "verbs: --iface=" << where << ": want DEVICE[:PORT], PORT 1..255";
    v.port = static_cast<uint8_t>(port);
  }
  v.max_payload = o.max_payload;
  TakeCommon(o, &v);
  v.api = o.verbs_api;
  // One signalled send per signal_every: never more than the slots there are (few slots would
  // otherwise be the endpoint's refusal).
  v.signal_every = std::max<uint32_t>(1, std::min(v.signal_every, v.send_slots));
  return v;
}

void RequireNoVerbsMulticast(const OpenOptions& o) {
  HS_REQUIRE(o.multicast.empty())
      << "verbs: --multicast needs the subnet manager's multicast join, which hogstream does not do yet; "
         "leave it out (positions then go to each machine)";
}

// A verbs job: this machine's UD queue pair (waiting up to exchange_timeout for the port to come
// up), every other machine's address learnt over UDP on the entries' HOST:PORT.
std::unique_ptr<Transport> OpenVerbsMachine(const PeerList& list, const OpenOptions& o) {
  RequireNoVerbsMulticast(o);
  const PeerId me = static_cast<PeerId>(o.rank);
  VerbsOptions v = VerbsFor(o.iface.empty() ? list.peers[me].iface : o.iface, o);
  // UD drops a message that finds no receive buffer posted (RNR), so post as many as may be in
  // flight to this machine from every other one, plus room for a held batch.
  if (!o.recv_slots && o.in_flight)
    v.recv_slots = static_cast<uint32_t>(std::min<size_t>(16384, size_t{o.in_flight} * (list.peers.size() - 1) + 256));
  VerbsDevice device(v);
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + o.exchange_timeout;
  std::unique_ptr<VerbsEndpoint> e;
  while (!(e = device.OpenEndpoint(me))) {  // the port is still coming up
    HS_REQUIRE(Clock::now() < deadline) << "verbs: port " << int(v.port) << " of "
                                        << (v.device.empty() ? "the first RDMA device" : v.device)
                                        << " did not become active in time";
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  OpenOptions b = o;  // the bootstrap: small udp messages, the backend's own slots
  b.max_payload = 256;
  b.send_slots = b.recv_slots = b.max_batch = 0;
  b.in_flight = 0;
  const TransportScheme* udp = FindTransport("udp");
  HS_REQUIRE(udp && udp->open_machine) << "verbs: its address exchange needs udp://, which this build lacks";
  auto bootstrap = udp->open_machine(list, b);
  VerbsExchangeOptions x;
  x.timeout = o.exchange_timeout;
  x.name = [&](PeerId r) { return "'" + list.peers[r].text + "'"; };
  const std::vector<VerbsAddress> all =
      ExchangeVerbsAddresses(*bootstrap, static_cast<uint32_t>(list.peers.size()), e->Address(), x);
  for (size_t r = 0; r < all.size(); ++r)
    if (r != me) e->AddPeer(static_cast<PeerId>(r), all[r]);
  return e;
}

std::vector<std::unique_ptr<Transport>> OpenVerbsHere(const PeerList& list, const OpenOptions& o) {
  RequireNoVerbsMulticast(o);
  std::vector<std::unique_ptr<VerbsEndpoint>> ends;
  for (size_t r = 0; r < list.peers.size(); ++r) {
    const PeerEntry& e = list.peers[r];
    HS_REQUIRE(e.local) << "verbs: '" << e.text << "': an end in this process is %[DEVICE[:PORT]]";
    HS_REQUIRE(NetnsOf(o, r).empty()) << "verbs: ends in this process take no network namespace";
    const VerbsOptions v = VerbsFor(e.iface, o);
    ends.push_back(VerbsDevice(v).OpenEndpoint(static_cast<PeerId>(r)));
    HS_REQUIRE(ends.back()) << "verbs: port " << int{v.port} << " is not active yet";
  }
  std::vector<std::unique_ptr<Transport>> out;
  for (size_t r = 0; r < ends.size(); ++r)
    for (size_t q = 0; q < ends.size(); ++q)
      if (q != r) ends[r]->AddPeer(static_cast<PeerId>(q), ends[q]->Address());
  for (auto& e : ends) out.push_back(std::move(e));
  return out;
}
#else
[[noreturn]] void NoVerbs() {
  HS_FAIL() << "verbs://: this hogstream was built without the verbs transport (install libibverbs-dev and "
               "rebuild), or use udp:// or raw://";
}
std::unique_ptr<Transport> OpenVerbsMachine(const PeerList&, const OpenOptions&) { NoVerbs(); }
std::vector<std::unique_ptr<Transport>> OpenVerbsHere(const PeerList&, const OpenOptions&) { NoVerbs(); }
#endif

TransportScheme VerbsScheme() {
  TransportScheme s;
  s.name = "verbs";
  s.address = "HOST:PORT";
  s.parse = [](const std::string& body, const UrlRules& rules, PeerEntry* e) -> std::string {
    if (rules.here) {  // ends in this process: on a device, no address exchange
      HS_REQUIRE(body[0] == '%') << rules.flag << ": '" << e->text << "': an end in this process is %[DEVICE[:PORT]]";
      e->local = true;
      e->iface = body.substr(1);
      return "";
    }
    ParseHostPort(body, rules, e);  // where the machine trades its RDMA address (UDP)
    return e->ip + ":" + std::to_string(e->port);
  };
  s.text = [](const PeerEntry& e) {
    return e.local ? "verbs://%" + e.iface : "verbs://" + e.ip + ":" + std::to_string(e.port);
  };
  s.is_here = [](const PeerEntry& e, const LocalAddresses& local, std::string*) { return HasAddress(local, e.ip); };
  s.local_text = [](const LocalAddresses& local) { return local.ipv4; };
  s.leaves_host = [](const PeerEntry& e) { return e.ip.rfind("127.", 0) != 0; };
  s.own_entry = HeldUdpEntry;
  s.open_machine = OpenVerbsMachine;
  s.open_here = OpenVerbsHere;
  return s;
}

}  // namespace

HS_REGISTER_TRANSPORT(verbs, VerbsScheme())

}  // namespace hogstream
