// udp:// in the transport factory (transport/registry.hpp): HOST:PORT entries, one socket per
// machine, multicast group 0 on 239.0.0.0/8, new machines admitted by address.
#include <arpa/inet.h>

#include <algorithm>
#include <optional>

#include "base/common.hpp"
#include "transport/open_backend.hpp"
#include "transport/udp/endpoint.hpp"

namespace hogstream {

uint32_t UdpPayloadFor(uint32_t mtu, bool keyed) {
  if (mtu == 0) return 8192;
  const uint32_t datagram = (mtu - 28) / 16 * 16;
  // The frame's header and trailer (a keyed frame's is 32 bytes: nonce and tag), the sender
  // padding to 16: a full frame fits one IP packet, never fragmented.
  const uint32_t trailer = static_cast<uint32_t>(FrameFormat::TrailerBytes(keyed));
  const uint32_t overhead = static_cast<uint32_t>(FrameFormat::kHeaderBytes) + (trailer + 15) / 16 * 16;
  return std::min<uint32_t>(32768, datagram > overhead + 16 ? datagram - overhead : 16);
}

namespace {

struct UdpGroup {
  std::string ip;
  uint16_t port = 0;
};

// --multicast's "GROUP:PORT" (GROUP in 239.0.0.0/8), checked before any socket is made.
std::optional<UdpGroup> UdpGroupOf(const std::string& multicast) {
  if (multicast.empty()) return std::nullopt;
  const size_t c = multicast.rfind(':');
  UdpGroup g;
  g.ip = multicast.substr(0, c == std::string::npos ? 0 : c);
  const int port = c == std::string::npos ? -1 : ParsePort(multicast.substr(c + 1));
  in_addr a{};
  HS_REQUIRE(port > 0 && inet_pton(AF_INET, g.ip.c_str(), &a) == 1 && (ntohl(a.s_addr) >> 24) == 239)
      << "--multicast=" << multicast << ": want GROUP:PORT with GROUP in 239.0.0.0/8 (like 239.77.0.1:9100)";
  g.port = static_cast<uint16_t>(port);
  return g;
}

// Entry r's endpoint, bound to its HOST:PORT; no peers yet.
std::unique_ptr<UdpEndpoint> MakeUdp(const PeerList& list, size_t r, const OpenOptions& o) {
  const PeerEntry& e = list.peers[r];
  UdpOptions u;
  u.address = e.ip;
  u.port = e.port;
  u.netns = NetnsOf(o, r);
  u.max_payload = o.max_payload ? o.max_payload : UdpPayloadFor(MtuOfAddress(e.ip, u.netns), o.key.has_value());
  TakeCommon(o, &u);
  u.gso = o.gso;
  return std::make_unique<UdpEndpoint>(static_cast<PeerId>(r), u);
}

void AddUdpGroup(UdpEndpoint& u, const std::optional<UdpGroup>& g, bool member, const std::string& ip) {
  if (!g) return;
  HS_REQUIRE(u.AddGroup(0, g->ip, g->port, member))
      << (member ? "udp: could not join " : "udp: cannot send to group ") << g->ip << (member ? " on " : " from ")
      << ip << (member ? " (no multicast route there? try: ip route add 224.0.0.0/4 dev IFACE)" : "");
}

std::unique_ptr<Transport> OpenUdpMachine(const PeerList& list, const OpenOptions& o) {
  const std::optional<UdpGroup> group = UdpGroupOf(o.multicast);
  const size_t me = static_cast<size_t>(o.rank);
  auto u = MakeUdp(list, me, o);
  for (size_t r = 0; r < list.peers.size(); ++r)
    if (r != me) u->AddPeer(static_cast<PeerId>(r), list.peers[r].ip, list.peers[r].port);
  AddUdpGroup(*u, group, GroupMember(o, me), list.peers[me].ip);
  return u;
}

std::vector<std::unique_ptr<Transport>> OpenUdpHere(const PeerList& list, const OpenOptions& o) {
  const std::optional<UdpGroup> group = UdpGroupOf(o.multicast);
  std::vector<std::unique_ptr<UdpEndpoint>> ends;
  for (size_t r = 0; r < list.peers.size(); ++r) ends.push_back(MakeUdp(list, r, o));
  std::vector<std::unique_ptr<Transport>> out;
  for (size_t r = 0; r < ends.size(); ++r) {
    for (size_t q = 0; q < ends.size(); ++q)
      if (q != r) ends[r]->AddPeer(static_cast<PeerId>(q), list.peers[q].ip, ends[q]->port());
    AddUdpGroup(*ends[r], group, GroupMember(o, r), list.peers[r].ip);
  }
  for (auto& e : ends) out.push_back(std::move(e));
  return out;
}

TransportScheme UdpScheme() {
  TransportScheme s;
  s.name = "udp";
  s.address = "HOST:PORT";
  s.admits = true;
  s.parse = [](const std::string& body, const UrlRules& rules, PeerEntry* e) {
    ParseHostPort(body, rules, e);
    return e->port ? e->ip + ":" + std::to_string(e->port) : std::string();
  };
  s.text = [](const PeerEntry& e) { return "udp://" + e.ip + ":" + std::to_string(e.port); };
  s.is_here = [](const PeerEntry& e, const LocalAddresses& local, std::string*) { return HasAddress(local, e.ip); };
  s.local_text = [](const LocalAddresses& local) { return local.ipv4; };
  s.leaves_host = [](const PeerEntry& e) { return e.ip.rfind("127.", 0) != 0; };
  s.own_entry = HeldUdpEntry;
  s.open_machine = OpenUdpMachine;
  s.open_here = OpenUdpHere;
  s.loopback = "udp://127.0.0.1:0,127.0.0.1:0";
  return s;
}

}  // namespace

HS_REGISTER_TRANSPORT(udp, UdpScheme())

}  // namespace hogstream
