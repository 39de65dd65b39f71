// The transport factory: urls parsed, this host's addresses, the endpoints opened and wired to
// their peers (see open.hpp).
#include "transport/open.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <netdb.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "base/common.hpp"
#include "transport/inproc/device.hpp"
#include "transport/netns.hpp"
#include "transport/raw/endpoint.hpp"
#include "transport/udp/endpoint.hpp"
#ifdef HOGSTREAM_VERBS
#include "transport/verbs/endpoint.hpp"
#include "transport/verbs/exchange.hpp"
#endif

namespace hogstream {

// ---------------------------------------------------------------- urls

namespace {

constexpr const char* kSchemes[] = {"udp", "raw", "verbs", "inproc"};  // in PeerScheme order

std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  return b == std::string::npos ? "" : s.substr(b, s.find_last_not_of(" \t\r") + 1 - b);
}

// A port 0..65535 written in decimal digits; -1 when it is not one.
int ParsePort(const std::string& s) {
  if (s.empty() || s.size() > 5 || s.find_first_not_of("0123456789") != std::string::npos) return -1;
  const long p = std::strtol(s.c_str(), nullptr, 10);
  return p <= 65535 ? static_cast<int>(p) : -1;
}

// Entries of a url's text: split on newlines and commas, '#' to the end of a line dropped,
// blanks ignored.
std::vector<std::string> Entries(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream items(line.substr(0, line.find('#')));
    for (std::string item; std::getline(items, item, ',');)
      if (std::string t = Trim(item); !t.empty()) out.push_back(std::move(t));
  }
  return out;
}

// The url's text: itself, or "@FILE"'s contents. `label` names it in errors: the flag, or
// FLAG=@FILE (not the list itself: it may be long).
std::string UrlText(const std::string& url, const UrlRules& rules, std::string* label) {
  if (url.empty() || url[0] != '@') {
    *label = rules.flag;
    return url;
  }
  *label = rules.flag + "=" + url;
  std::ifstream in(url.substr(1));
  HS_REQUIRE(in) << *label << ": cannot read " << url.substr(1) << ": " << ErrnoText(errno);
  std::ostringstream all;
  all << in.rdbuf();
  return all.str();
}

// udp, verbs: HOST:PORT, HOST resolved to its first IPv4 address; PORT 0 only `here`.
void ParseHostPort(const std::string& body, const UrlRules& rules, PeerEntry* e) {
  const size_t c = body.rfind(':');
  HS_REQUIRE(c != std::string::npos && c > 0) << rules.flag << ": '" << e->text << "' is not HOST:PORT";
  const int port = ParsePort(body.substr(c + 1));
  HS_REQUIRE(port > 0 || (port == 0 && rules.here))
      << rules.flag << ": bad port in '" << e->text << "' (want " << (rules.here ? "0" : "1") << "..65535)";
  e->port = static_cast<uint16_t>(port);
  const std::string host = body.substr(0, c);
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  HS_REQUIRE(rc == 0 && res) << rules.flag << ": cannot resolve '" << host << "' in '" << e->text
                             << "' to an IPv4 address: " << gai_strerror(rc);
  char ip[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(res->ai_addr)->sin_addr, ip, sizeof ip);
  freeaddrinfo(res);
  e->ip = ip;
}

// A machine's own setting in a topology file's entry: solvers=SPEC, private, iface=NAME.
void ParseSetting(const std::string& word, const std::string& entry, const std::string& flag, PeerEntry* e) {
  const size_t eq = word.find('=');
  const std::string key = word.substr(0, eq), value = eq == std::string::npos ? "" : word.substr(eq + 1);
  if (key == "solvers" && !value.empty()) {
    e->solvers = value;
  } else if (key == "iface" && !value.empty()) {
    e->iface = value;
  } else if (word == "private") {
    e->private_copies = true;
  } else {
    HS_FAIL() << flag << ": '" << word << "' in '" << entry << "' is not a machine setting "
              << "(want solvers=SPEC, private or iface=NAME after the address)";
  }
}

// Entry r's scheme (which must agree with the list's, set by entry 0) taken off its text: the
// address that is left.
std::string SchemeAndBody(const PeerEntry& e, size_t r, const UrlRules& rules, PeerList* list) {
  const size_t known_schemes = rules.here ? 4 : 3;
  const char* want = rules.here ? "udp://, raw://, verbs:// or inproc://" : "udp://, raw:// or verbs://";
  const size_t s = e.text.find("://");
  if (s == std::string::npos) {
    HS_REQUIRE(r > 0) << rules.flag << ": '" << e.text << "' has no scheme (want udp://HOST:PORT,..., "
                      << "raw://MAC,... or verbs://HOST:PORT,...)";
    return e.text;
  }
  const std::string scheme = e.text.substr(0, s);
  const auto* known = std::find(kSchemes, kSchemes + known_schemes, scheme);
  HS_REQUIRE(known != kSchemes + known_schemes)
      << rules.flag << ": unknown scheme '" << scheme << "://' in '" << e.text << "' (want " << want << ")";
  const auto given = static_cast<PeerScheme>(known - kSchemes);
  HS_REQUIRE(r == 0 || given == list->scheme) << rules.flag << ": '" << e.text << "' is " << scheme
                                              << ":// but the list is " << kSchemes[int(list->scheme)] << "://";
  list->scheme = given;
  return e.text.substr(s + 3);
}

// Entry e's address from `body`; returns what makes the machine itself ("" where two entries
// may name the same place: ends in this process on one device, or on kernel-picked ports).
std::string ParseAddress(PeerScheme scheme, const std::string& body, const UrlRules& rules, PeerEntry* e) {
  const bool local = rules.here && body[0] == '%';
  switch (scheme) {
    case PeerScheme::kUdp:
      ParseHostPort(body, rules, e);
      return e->port ? e->ip + ":" + std::to_string(e->port) : "";
    case PeerScheme::kRaw:
      if (local) {
        HS_REQUIRE(body.size() > 1) << rules.flag << ": '" << e->text << "' names no interface (want %IFACE)";
        e->local = true;
        e->iface = body.substr(1);
        return body;
      }
      try {
        e->mac = ParseMac(body);
      } catch (const Error& bad) {
        HS_FAIL() << rules.flag << ": " << bad.what();
      }
      return FormatMac(e->mac);
    case PeerScheme::kVerbs:
      if (rules.here) {  // ends in this process: on a device, no address exchange
        HS_REQUIRE(local) << rules.flag << ": '" << e->text << "': an end in this process is %[DEVICE[:PORT]]";
        e->local = true;
        e->iface = body.substr(1);
        return "";
      }
      ParseHostPort(body, rules, e);  // where the machine trades its RDMA address (UDP)
      return e->ip + ":" + std::to_string(e->port);
    case PeerScheme::kInproc: break;
  }
  HS_FAIL() << rules.flag << ": '" << e->text << "': inproc://[NAME] is a url of its own (two ends), not a list";
}

// "inproc://[NAME]": the two ends of one link in this process.
PeerList InprocUrl(const std::string& url, const UrlRules& rules) {
  HS_REQUIRE(url.find_first_of(", \t\r\n#") == std::string::npos)
      << rules.flag << ": '" << url << "': inproc://[NAME] names one link of two ends, not a list";
  PeerList list;
  list.scheme = PeerScheme::kInproc;
  PeerEntry e;
  e.text = url;
  e.local = true;
  list.peers = {e, e};
  return list;
}

}  // namespace

const char* SchemeName(PeerScheme s) { return kSchemes[static_cast<int>(s)]; }

PeerList ParseTransportUrl(const std::string& url, const UrlRules& rules) {
  if (rules.here && url.rfind("inproc://", 0) == 0) return InprocUrl(url, rules);
  std::string label;
  const std::vector<std::string> entries = Entries(UrlText(url, rules, &label));
  HS_REQUIRE(!entries.empty()) << label << " names no machine";
  HS_REQUIRE(entries.size() <= kMaxPeers) << label << " names " << entries.size() << " machines, more than "
                                          << kMaxPeers;
  PeerList list;
  std::map<std::string, size_t> seen;  // machine identity -> rank
  for (size_t r = 0; r < entries.size(); ++r) {
    PeerEntry e;
    std::istringstream words(entries[r]);  // the address, then this machine's settings
    words >> e.text;
    for (std::string w; words >> w;) ParseSetting(w, entries[r], rules.flag, &e);
    const std::string body = SchemeAndBody(e, r, rules, &list);
    HS_REQUIRE(!body.empty()) << rules.flag << ": '" << e.text << "' names no machine";
    const std::string identity = ParseAddress(list.scheme, body, rules, &e);
    if (!identity.empty()) {
      const auto [at, fresh] = seen.emplace(identity, r);
      HS_REQUIRE(fresh) << rules.flag << ": '" << entries[at->second] << "' and '" << e.text
                        << "' are the same machine (" << identity << ", entries " << at->second << " and " << r
                        << ")";
    }
    list.peers.push_back(std::move(e));
  }
  return list;
}

std::string PeerName(const PeerList& list, int r) {
  HS_CHECK(r >= 0 && static_cast<size_t>(r) < list.peers.size()) << "rank " << r;
  const PeerEntry& e = list.peers[r];
  const std::string scheme = std::string(kSchemes[int(list.scheme)]) + "://";
  if (list.scheme == PeerScheme::kInproc) return e.text;
  if (e.local) return scheme + "%" + e.iface;
  if (list.scheme == PeerScheme::kRaw) return scheme + FormatMac(e.mac);
  return scheme + e.ip + ":" + std::to_string(e.port);
}

// ---------------------------------------------------------------- this host

LocalAddresses ReadLocalAddresses(const std::string& netns) {
  ifaddrs* ifs = nullptr;
  {
    NetnsScope in_ns(netns);
    HS_REQUIRE(getifaddrs(&ifs) == 0) << "getifaddrs: " << ErrnoText(errno);
  }
  std::unique_ptr<ifaddrs, void (*)(ifaddrs*)> guard(ifs, freeifaddrs);
  LocalAddresses local;
  for (const ifaddrs* i = ifs; i; i = i->ifa_next) {
    if (!i->ifa_addr) continue;
    if (i->ifa_addr->sa_family == AF_INET && (i->ifa_flags & IFF_UP)) {
      char ip[INET_ADDRSTRLEN];
      inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr, ip, sizeof ip);
      local.ipv4.push_back(ip);
    } else if (i->ifa_addr->sa_family == AF_PACKET) {
      const auto* ll = reinterpret_cast<const sockaddr_ll*>(i->ifa_addr);
      Mac mac{};
      if (ll->sll_halen != mac.size()) continue;
      std::memcpy(mac.data(), ll->sll_addr, mac.size());
      if (mac != Mac{}) local.macs.emplace_back(i->ifa_name, mac);
    }
  }
  return local;
}

namespace {

// The MTU of the interface holding IPv4 address `ip` in namespace `netns` ("" = the calling
// thread's); 0 when none holds it (or the kernel will not say).
uint32_t MtuOfAddress(const std::string& ip, const std::string& netns) {
  NetnsScope in_ns(netns);
  ifaddrs* all = nullptr;
  if (getifaddrs(&all) != 0) return 0;
  std::string name;
  for (ifaddrs* a = all; a && name.empty(); a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
    char text[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, text, sizeof text);
    if (ip == text) name = a->ifa_name;
  }
  freeifaddrs(all);
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (name.empty() || name.size() >= IFNAMSIZ || fd < 0) {
    if (fd >= 0) close(fd);
    return 0;
  }
  ifreq req{};
  std::memcpy(req.ifr_name, name.c_str(), name.size());
  const int rc = ioctl(fd, SIOCGIFMTU, &req);
  close(fd);
  return rc == 0 && req.ifr_mtu > 0 ? static_cast<uint32_t>(req.ifr_mtu) : 0;
}

// The first interface in `netns` whose MAC is `mac`; "" when none.
std::string InterfaceWithMac(const Mac& mac, const std::string& netns) {
  for (const auto& [name, m] : ReadLocalAddresses(netns).macs)
    if (m == mac) return name;
  return "";
}

}  // namespace

uint32_t UdpPayloadFor(uint32_t mtu, bool keyed) {
  if (mtu == 0) return 8192;
  const uint32_t datagram = (mtu - 28) / 16 * 16;
  // The frame's header and trailer (a keyed frame's is 32 bytes: nonce and tag), the sender
  // padding to 16: a full frame fits one IP packet, never fragmented.
  const uint32_t trailer = static_cast<uint32_t>(FrameFormat::TrailerBytes(keyed));
  const uint32_t overhead = static_cast<uint32_t>(FrameFormat::kHeaderBytes) + (trailer + 15) / 16 * 16;
  return std::min<uint32_t>(32768, datagram > overhead + 16 ? datagram - overhead : 16);
}

// ---------------------------------------------------------------- opening

namespace {

std::atomic<uint64_t> g_opened{0};

const std::string& NetnsOf(const OpenOptions& o, size_t r) {
  static const std::string kHere;
  if (o.netns.empty()) return kHere;
  HS_CHECK(o.netns.size() == 1 || r < o.netns.size()) << "OpenOptions::netns has no entry for rank " << r;
  return o.netns.size() == 1 ? o.netns[0] : o.netns[r];
}

bool Member(const OpenOptions& o, size_t r) {
  return o.group_members.empty() ||
         std::find(o.group_members.begin(), o.group_members.end(), static_cast<PeerId>(r)) != o.group_members.end();
}

// ---- udp

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
// What every wire backend's options take alike from OpenOptions: slots and batch (where given),
// the job, its key and liveness. (raw has no receive slots: its ring is sized from the MTU.)
template <class BackendOptions>
void TakeCommon(const OpenOptions& o, BackendOptions* b) {
  if (o.send_slots) b->send_slots = o.send_slots;
  if constexpr (requires { b->recv_slots; }) {
    if (o.recv_slots) b->recv_slots = o.recv_slots;
  }
  if (o.max_batch) b->max_batch = o.max_batch;
  b->job = o.job;
  b->key = o.key;
  b->heartbeat_ms = o.heartbeat_ms;
  b->peer_timeout_ms = o.peer_timeout_ms;
}

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

std::unique_ptr<UdpEndpoint> OpenUdpMachine(const PeerList& list, const OpenOptions& o) {
  const std::optional<UdpGroup> group = UdpGroupOf(o.multicast);
  const size_t me = static_cast<size_t>(o.rank);
  auto u = MakeUdp(list, me, o);
  for (size_t r = 0; r < list.peers.size(); ++r)
    if (r != me) u->AddPeer(static_cast<PeerId>(r), list.peers[r].ip, list.peers[r].port);
  AddUdpGroup(*u, group, Member(o, me), list.peers[me].ip);
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
    AddUdpGroup(*ends[r], group, Member(o, r), list.peers[r].ip);
  }
  for (auto& e : ends) out.push_back(std::move(e));
  return out;
}

// ---- raw

// Group 0's MAC: "on" = a locally administered group, "HS", then the job folded in; or a group
// MAC. Checked before any socket is made.
std::optional<Mac> RawGroupOf(const OpenOptions& o) {
  if (o.multicast.empty()) return std::nullopt;
  Mac group{0x03, 0x48, 0x53, 0, 0, 0};
  if (o.multicast != "on") return ParseMac(o.multicast);
  for (int i = 0; i < 8; ++i) group[3 + i % 3] ^= static_cast<uint8_t>(o.job >> (8 * i));
  return group;
}

// Entry r's endpoint on `iface` (default: the entry's, else the interface whose MAC it is); no
// peers yet. An entry's MAC must be the interface's: peers know it by that.
std::unique_ptr<RawEndpoint> MakeRaw(const PeerList& list, size_t r, const OpenOptions& o, std::string iface) {
  const PeerEntry& e = list.peers[r];
  RawOptions ro;
  ro.netns = NetnsOf(o, r);
  if (iface.empty()) iface = e.iface;
  if (iface.empty()) iface = InterfaceWithMac(e.mac, ro.netns);
  HS_REQUIRE(!iface.empty()) << "raw: " << FormatMac(e.mac) << " (rank " << r
                             << ") is on no interface here: give the interface (--iface)";
  ro.iface = iface;
  ro.max_payload = o.max_payload;
  TakeCommon(o, &ro);
  auto end = std::make_unique<RawEndpoint>(static_cast<PeerId>(r), ro);
  HS_REQUIRE(e.local || end->mac() == e.mac)
      << "raw: interface '" << iface << "' has MAC " << FormatMac(end->mac()) << ", but this machine's entry (rank "
      << r << ") is '" << e.text << "'";
  return end;
}

std::unique_ptr<RawEndpoint> OpenRawMachine(const PeerList& list, const OpenOptions& o) {
  const std::optional<Mac> group = RawGroupOf(o);
  const size_t me = static_cast<size_t>(o.rank);
  auto e = MakeRaw(list, me, o, o.iface);
  for (size_t r = 0; r < list.peers.size(); ++r)
    if (r != me) e->AddPeer(static_cast<PeerId>(r), list.peers[r].mac);
  if (group) e->AddGroup(0, *group, Member(o, me));
  return e;
}

std::vector<std::unique_ptr<Transport>> OpenRawHere(const PeerList& list, const OpenOptions& o) {
  const std::optional<Mac> group = RawGroupOf(o);
  std::vector<std::unique_ptr<RawEndpoint>> ends;
  for (size_t r = 0; r < list.peers.size(); ++r) ends.push_back(MakeRaw(list, r, o, ""));
  std::vector<std::unique_ptr<Transport>> out;
  for (size_t r = 0; r < ends.size(); ++r) {
    for (size_t q = 0; q < ends.size(); ++q)
      if (q != r) ends[r]->AddPeer(static_cast<PeerId>(q), ends[q]->mac());
    if (group) ends[r]->AddGroup(0, *group, Member(o, r));
  }
  for (auto& e : ends) out.push_back(std::move(e));
  return out;
}

// ---- verbs

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
  const VerbsOptions v = VerbsFor(o.iface.empty() ? list.peers[me].iface : o.iface, o);
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
  auto bootstrap = OpenUdpMachine(list, b);
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

// ---- inproc

std::vector<std::unique_ptr<Transport>> OpenInprocPair(const OpenOptions& o) {
  HS_REQUIRE(o.multicast.empty()) << "--multicast needs a network transport (udp or raw)";
  InprocOptions io;
  io.max_payload = o.max_payload ? o.max_payload : 32768;
  if (o.send_slots) io.slots = o.send_slots;
  auto [a, b] = InprocDevice::MakePair(io);
  std::vector<std::unique_ptr<Transport>> out;
  out.push_back(std::move(a));
  out.push_back(std::move(b));
  return out;
}

}  // namespace

std::unique_ptr<Transport> OpenTransport(const PeerList& list, const OpenOptions& o) {
  const int n = static_cast<int>(list.peers.size());
  HS_CHECK(o.rank >= 0 && o.rank < n) << "OpenTransport: rank " << o.rank << " of " << n << " entries";
  for (const PeerEntry& e : list.peers) {
    HS_REQUIRE(!e.local && !(list.scheme == PeerScheme::kUdp && e.port == 0))
        << "'" << e.text << "' is an end in this process: open the url's ends together (OpenTransports)";
  }
  std::unique_ptr<Transport> t;
  switch (list.scheme) {
    case PeerScheme::kUdp: t = OpenUdpMachine(list, o); break;
    case PeerScheme::kRaw: t = OpenRawMachine(list, o); break;
    case PeerScheme::kVerbs: t = OpenVerbsMachine(list, o); break;
    case PeerScheme::kInproc: HS_FAIL() << "inproc://: both ends live in one process (OpenTransports)";
  }
  g_opened.fetch_add(1, std::memory_order_relaxed);
  return t;
}

std::unique_ptr<Transport> OpenTransport(const std::string& url, const OpenOptions& o) {
  return OpenTransport(ParseTransportUrl(url), o);
}

std::vector<std::unique_ptr<Transport>> OpenTransports(const PeerList& list, const OpenOptions& o) {
  HS_CHECK(!list.peers.empty()) << "OpenTransports: an empty list";
  std::vector<std::unique_ptr<Transport>> ends;
  switch (list.scheme) {
    case PeerScheme::kUdp: ends = OpenUdpHere(list, o); break;
    case PeerScheme::kRaw: ends = OpenRawHere(list, o); break;
    case PeerScheme::kVerbs: ends = OpenVerbsHere(list, o); break;
    case PeerScheme::kInproc: ends = OpenInprocPair(o); break;
  }
  g_opened.fetch_add(ends.size(), std::memory_order_relaxed);
  return ends;
}

std::vector<std::unique_ptr<Transport>> OpenTransports(const std::string& url, const OpenOptions& o) {
  UrlRules rules;
  rules.here = true;
  return OpenTransports(ParseTransportUrl(url, rules), o);
}

uint64_t TransportsOpened() { return g_opened.load(std::memory_order_relaxed); }

}  // namespace hogstream
