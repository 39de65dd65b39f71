// --peers: parsing, finding this machine in the list, opening its endpoint (see peers.hpp).
#include "bin/peers.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include <netdb.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <thread>
#include <chrono>

#include "base/common.hpp"
#include "sync/net_job.hpp"
#include "transport/netns.hpp"
#include "transport/raw/endpoint.hpp"
#include "transport/udp/endpoint.hpp"
#ifdef HOGSTREAM_VERBS
#include "transport/verbs/endpoint.hpp"
#include "transport/verbs/exchange.hpp"
#endif

namespace hogstream {

namespace {

constexpr const char* kSchemes[] = {"udp", "raw", "verbs"};  // in PeerScheme order

std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  return b == std::string::npos ? "" : s.substr(b, s.find_last_not_of(" \t\r") + 1 - b);
}

// A port 1..65535 written in decimal digits; 0 when it is not one.
uint16_t ParsePort(const std::string& s) {
  if (s.empty() || s.size() > 5 || s.find_first_not_of("0123456789") != std::string::npos) return 0;
  const long p = std::strtol(s.c_str(), nullptr, 10);
  return p <= 65535 ? static_cast<uint16_t>(p) : 0;
}

// Entries of a --peers text: split on newlines and commas, '#' to the end of a line dropped,
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

// udp: HOST:PORT, HOST resolved to its first IPv4 address.
void ParseUdp(const std::string& body, PeerEntry* e) {
  const size_t c = body.rfind(':');
  HS_REQUIRE(c != std::string::npos && c > 0) << "--peers: '" << e->text << "' is not HOST:PORT";
  e->port = ParsePort(body.substr(c + 1));
  HS_REQUIRE(e->port != 0) << "--peers: bad port in '" << e->text << "' (want 1..65535)";
  const std::string host = body.substr(0, c);
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  HS_REQUIRE(rc == 0 && res) << "--peers: cannot resolve '" << host << "' in '" << e->text
                             << "' to an IPv4 address: " << gai_strerror(rc);
  char ip[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(res->ai_addr)->sin_addr, ip, sizeof ip);
  freeaddrinfo(res);
  e->ip = ip;
}

// A machine's own setting in a topology file's entry: solvers=SPEC, private, iface=NAME.
void ParseSetting(const std::string& word, const std::string& entry, PeerEntry* e) {
  const size_t eq = word.find('=');
  const std::string key = word.substr(0, eq), value = eq == std::string::npos ? "" : word.substr(eq + 1);
  if (key == "solvers" && !value.empty()) {
    e->solvers = value;
  } else if (key == "iface" && !value.empty()) {
    e->iface = value;
  } else if (word == "private") {
    e->private_copies = true;
  } else {
    HS_FAIL() << "--peers: '" << word << "' in '" << entry << "' is not a machine setting "
              << "(want solvers=SPEC, private or iface=NAME after the address)";
  }
}

// The launchers FindSelf knows: (rank variable, size variable, who sets them).
struct Launcher {
  const char *rank, *size, *who;
};
constexpr Launcher kLaunchers[] = {{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "mpirun"},
                                   {"PMI_RANK", "PMI_SIZE", "mpirun (PMI)"},
                                   {"SLURM_PROCID", "SLURM_NTASKS", "srun"},
                                   {"RANK", "WORLD_SIZE", "torchrun"}};

int EnvInt(const std::map<std::string, std::string>& env, const char* name) {
  const auto it = env.find(name);
  HS_REQUIRE(it != env.end()) << name << " is not set (its rank/size partner is)";
  const std::string& v = it->second;
  const bool digits = !v.empty() && v.size() <= 9 && v.find_first_not_of("0123456789") == std::string::npos;
  HS_REQUIRE(digits) << name << "='" << v << "' is not a number";
  return std::atoi(v.c_str());
}

std::string Join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return s.empty() ? "none" : s;
}

}  // namespace

PeerList ParsePeers(const std::string& spec) {
  std::string text = spec;
  const bool file = !spec.empty() && spec[0] == '@';
  if (file) {
    std::ifstream in(spec.substr(1));
    HS_REQUIRE(in) << "--peers=" << spec << ": cannot read " << spec.substr(1) << ": " << ErrnoText(errno);
    std::ostringstream all;
    all << in.rdbuf();
    text = all.str();
  }
  const std::vector<std::string> entries = Entries(text);
  const std::string flag = file ? "--peers=" + spec : "--peers";  // not the list itself: it may be long
  HS_REQUIRE(!entries.empty()) << flag << " names no machine";
  HS_REQUIRE(entries.size() <= kMaxPeers) << flag << " names " << entries.size() << " machines, more than "
                                          << kMaxPeers;
  PeerList list;
  std::map<std::string, size_t> seen;  // machine identity -> rank
  for (size_t r = 0; r < entries.size(); ++r) {
    PeerEntry e;
    std::istringstream words(entries[r]);  // the address, then this machine's settings
    words >> e.text;
    for (std::string w; words >> w;) ParseSetting(w, entries[r], &e);
    std::string body = e.text;
    if (const size_t s = e.text.find("://"); s != std::string::npos) {
      const std::string scheme = e.text.substr(0, s);
      const auto* known = std::find(std::begin(kSchemes), std::end(kSchemes), scheme);
      HS_REQUIRE(known != std::end(kSchemes)) << "--peers: unknown scheme '" << scheme << "://' in '" << e.text
                                              << "' (want udp://, raw:// or verbs://)";
      const auto given = static_cast<PeerScheme>(known - std::begin(kSchemes));
      HS_REQUIRE(r == 0 || given == list.scheme) << "--peers: '" << e.text << "' is " << scheme
                                                 << ":// but the list is " << kSchemes[int(list.scheme)] << "://";
      list.scheme = given;
      body = e.text.substr(s + 3);
    } else {
      HS_REQUIRE(r > 0) << "--peers: '" << e.text << "' has no scheme (want udp://HOST:PORT,..., raw://MAC,... or "
                        << "verbs://HOST:PORT,...)";
    }
    HS_REQUIRE(!body.empty()) << "--peers: '" << e.text << "' names no machine";
    std::string identity;
    switch (list.scheme) {
      case PeerScheme::kUdp:
        ParseUdp(body, &e);
        identity = e.ip + ":" + std::to_string(e.port);
        break;
      case PeerScheme::kRaw:
        try {
          e.mac = ParseMac(body);
        } catch (const Error& bad) {
          HS_FAIL() << "--peers: " << bad.what();
        }
        identity = FormatMac(e.mac);
        break;
      case PeerScheme::kVerbs:  // HOST:PORT where the machine trades its RDMA address (UDP)
        ParseUdp(body, &e);
        identity = e.ip + ":" + std::to_string(e.port);
        break;
    }
    const auto [at, fresh] = seen.emplace(identity, r);
    HS_REQUIRE(fresh) << "--peers: '" << entries[at->second] << "' and '" << e.text << "' are the same machine ("
                      << identity << ", entries " << at->second << " and " << r << ")";
    list.peers.push_back(std::move(e));
  }
  return list;
}

PeerList ParseRawBinPeers(const std::string& text) {
  if (text.find("://") == std::string::npos && text.rfind('@', 0) != 0) {
    std::string spec = "raw://";
    std::istringstream parts(text);
    for (std::string mac; std::getline(parts, mac, ':');) {
      HS_REQUIRE(mac.size() == 12) << "peers '" << text << "': '" << mac << "' is not a MAC of 12 hex digits "
                                   << "(want MAC1:MAC2:..., like 0025908a56d8:0025908a56d9, or raw://MAC,MAC)";
      spec += mac + ",";
    }
    return ParsePeers(spec);  // ',' at the end is a blank entry, ignored
  }
  PeerList list = ParsePeers(text);
  HS_REQUIRE(list.scheme == PeerScheme::kRaw) << "peers '" << text << "' are not raw:// MACs";
  return list;
}

std::string PeerName(const PeerList& list, int r) {
  HS_CHECK(r >= 0 && static_cast<size_t>(r) < list.peers.size()) << "rank " << r;
  const PeerEntry& e = list.peers[r];
  const std::string scheme = std::string(kSchemes[int(list.scheme)]) + "://";
  switch (list.scheme) {
    case PeerScheme::kUdp:
    case PeerScheme::kVerbs: break;
    case PeerScheme::kRaw: return scheme + FormatMac(e.mac);
  }
  return scheme + e.ip + ":" + std::to_string(e.port);
}

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

SelfRank FindSelf(const PeerList& list, const LocalAddresses& local,
                  const std::map<std::string, std::string>& env, int forced) {
  const int n = static_cast<int>(list.peers.size());
  HS_REQUIRE(n > 0) << "--peers names no machine";
  // Which entries are this machine (raw: and on which interface).
  std::vector<int> mine;
  std::map<int, std::string> iface;
  for (int r = 0; r < n; ++r) {
    const PeerEntry& e = list.peers[r];
    if (list.scheme != PeerScheme::kRaw &&
        std::find(local.ipv4.begin(), local.ipv4.end(), e.ip) != local.ipv4.end()) {
      mine.push_back(r);
    } else if (list.scheme == PeerScheme::kRaw) {
      for (const auto& [name, mac] : local.macs) {
        if (mac != e.mac) continue;
        mine.push_back(r);
        iface[r] = name;
        break;
      }
    }
  }
  auto pick = [&](int r, std::string how) { return SelfRank{r, std::move(how), iface.count(r) ? iface[r] : ""}; };
  if (forced >= 0) {
    HS_REQUIRE(forced < n) << "--rank=" << forced << " is out of range: --peers names " << n << " machines (ranks 0.."
                           << n - 1 << ")";
    return pick(forced, "--rank");
  }
  // A launcher's rank, where one is set (the first pair present); its size must be the list's.
  const Launcher* launcher = nullptr;
  int launched = -1;
  for (const Launcher& l : kLaunchers) {
    if (!env.count(l.rank) && !env.count(l.size)) continue;
    launcher = &l;
    launched = EnvInt(env, l.rank);
    const int size = EnvInt(env, l.size);
    HS_REQUIRE(size == n) << l.who << " started " << size << " processes (" << l.size << "=" << size
                          << ") but --peers names " << n << " machines";
    HS_REQUIRE(launched < n) << l.rank << "=" << launched << " is out of range for " << n << " machines";
    break;
  }
  if (mine.size() == 1) return pick(mine[0], "the only local entry");
  std::vector<std::string> names;
  for (int r : mine) names.push_back("'" + list.peers[r].text + "'");
  if (launcher) {
    HS_REQUIRE(mine.empty() || std::find(mine.begin(), mine.end(), launched) != mine.end())
        << launcher->rank << "=" << launched << " picks '" << list.peers[launched].text
        << "', which is not this machine (its entries: " << Join(names) << ")";
    return pick(launched, launcher->rank);
  }
  if (mine.empty()) {
    std::vector<std::string> have;
    if (list.scheme != PeerScheme::kRaw) {
      have = local.ipv4;
    } else {
      for (const auto& [name, mac] : local.macs) have.push_back(name + " " + FormatMac(mac));
    }
    HS_FAIL() << "none of the " << n << " --peers entries is an address of this machine (local: " << Join(have)
              << ")";
  }
  HS_FAIL() << "--peers entries " << names[0] << " and " << names[1]
            << " are both local; run under mpirun/srun/torchrun or give --rank";
}

std::map<std::string, std::string> LauncherEnv() {
  std::map<std::string, std::string> env;
  for (const Launcher& l : kLaunchers) {
    for (const char* name : {l.rank, l.size})
      if (const char* v = std::getenv(name)) env[name] = v;
  }
  return env;
}

namespace {

// Liveness is the job layer's: the transport never calls a peer down by itself (49 days).
constexpr uint32_t kNeverDown = std::numeric_limits<uint32_t>::max();

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

namespace {

// The udp endpoint of rank `me` on its entry's ip:port with every other entry as a peer (udp
// jobs, and the bootstrap of a verbs job). The job layer decides liveness, not the transport.
std::unique_ptr<UdpEndpoint> OpenUdp(const PeerList& list, PeerId me, const PeerOpenOptions& opt, uint32_t max_payload) {
  UdpOptions o;
  o.address = list.peers[me].ip;
  o.port = list.peers[me].port;
  o.max_payload = max_payload;
  o.job = opt.job;
  o.key = opt.key;
  o.peer_timeout_ms = kNeverDown;
  o.netns = opt.netns;
  auto u = std::make_unique<UdpEndpoint>(me, o);
  for (size_t r = 0; r < list.peers.size(); ++r)
    if (r != me) u->AddPeer(static_cast<PeerId>(r), list.peers[r].ip, list.peers[r].port);
  return u;
}

#ifdef HOGSTREAM_VERBS
// A verbs job: this machine's UD queue pair on --iface=DEVICE[:PORT] (default: the first device,
// port 1), every other machine's address learnt over UDP on the --peers entries.
std::unique_ptr<Transport> OpenVerbs(const PeerList& list, PeerId me, const PeerOpenOptions& opt) {
  HS_REQUIRE(opt.multicast.empty())
      << "verbs: --multicast needs the subnet manager's multicast join, which hogstream does not do yet; "
         "leave it out (positions then go to each machine)";
  VerbsOptions o;
  const size_t colon = opt.iface.rfind(':');
  o.device = opt.iface.substr(0, colon);
  if (colon != std::string::npos) {
    const uint16_t port = ParsePort(opt.iface.substr(colon + 1));
    HS_REQUIRE(port > 0 && port < 256) << "verbs: --iface=" << opt.iface << ": want DEVICE[:PORT], PORT 1..255";
    o.port = static_cast<uint8_t>(port);
  }
  o.max_payload = opt.max_payload;
  o.job = opt.job;
  o.key = opt.key;
  o.peer_timeout_ms = kNeverDown;
  o.api = opt.verbs_api;
  // UD drops a message that finds no receive buffer posted (RNR), so post as many as the job
  // may have in flight to this machine: a window of positions from each other master and one
  // of deltas answering ours, per machine, plus room for control messages and a held batch.
  const uint32_t window = NetJobOptions{}.window;
  o.recv_slots = static_cast<uint32_t>(std::min<size_t>(16384, 2 * window * (list.peers.size() - 1) + 256));
  VerbsDevice device(o);
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + opt.exchange_timeout;
  std::unique_ptr<VerbsEndpoint> e;
  while (!(e = device.OpenEndpoint(me))) {  // the port is still coming up
    HS_REQUIRE(Clock::now() < deadline) << "verbs: port " << int(o.port) << " of "
                                        << (o.device.empty() ? "the first RDMA device" : o.device)
                                        << " did not become active in time";
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  auto bootstrap = OpenUdp(list, me, opt, 256);
  VerbsExchangeOptions x;
  x.timeout = opt.exchange_timeout;
  x.name = [&](PeerId r) { return "'" + list.peers[r].text + "'"; };
  const std::vector<VerbsAddress> all =
      ExchangeVerbsAddresses(*bootstrap, static_cast<uint32_t>(list.peers.size()), e->Address(), x);
  for (size_t r = 0; r < all.size(); ++r)
    if (r != me) e->AddPeer(static_cast<PeerId>(r), all[r]);
  return e;
}
#endif

}  // namespace

std::unique_ptr<Transport> OpenPeers(const PeerList& list, const SelfRank& self, const PeerOpenOptions& opt) {
  const int n = static_cast<int>(list.peers.size());
  HS_CHECK(self.rank >= 0 && self.rank < n) << "rank " << self.rank << " of " << n;
  const PeerId me = static_cast<PeerId>(self.rank);
  if (list.scheme == PeerScheme::kUdp) {
    // The group checked before any socket is made.
    const size_t c = opt.multicast.rfind(':');
    const std::string group = opt.multicast.substr(0, c == std::string::npos ? 0 : c);
    const uint16_t port = c == std::string::npos ? 0 : ParsePort(opt.multicast.substr(c + 1));
    in_addr a{};
    HS_REQUIRE(opt.multicast.empty() ||
               (port != 0 && inet_pton(AF_INET, group.c_str(), &a) == 1 && (ntohl(a.s_addr) >> 24) == 239))
        << "--multicast=" << opt.multicast << ": want GROUP:PORT with GROUP in 239.0.0.0/8 (like 239.77.0.1:9100)";
    auto u = OpenUdp(list, me, opt,
                     opt.max_payload ? opt.max_payload : UdpPayloadFor(MtuOfAddress(list.peers[me].ip, opt.netns), opt.key.has_value()));
    if (!opt.multicast.empty()) {
      HS_REQUIRE(u->AddGroup(0, group, port, true))
          << "udp: could not join " << group << " on " << list.peers[me].ip
          << " (no multicast route there? try: ip route add 224.0.0.0/4 dev IFACE)";
    }
    return u;
  }
  if (list.scheme == PeerScheme::kRaw) {
    RawOptions o;
    o.iface = opt.iface.empty() ? self.iface : opt.iface;
    HS_REQUIRE(!o.iface.empty()) << "raw: " << FormatMac(list.peers[me].mac) << " (rank " << me
                                 << ") is on no interface here: give the interface (--iface)";
    o.netns = opt.netns;
    o.max_payload = opt.max_payload;
    o.job = opt.job;
    o.key = opt.key;
    o.peer_timeout_ms = kNeverDown;
    Mac group{0x03, 0x48, 0x53, 0, 0, 0};  // "on": a locally administered group, "HS", then the job folded
    if (opt.multicast == "on") {
      for (int i = 0; i < 8; ++i) group[3 + i % 3] ^= static_cast<uint8_t>(opt.job >> (8 * i));
    } else if (!opt.multicast.empty()) {
      group = ParseMac(opt.multicast);
    }
    auto e = std::make_unique<RawEndpoint>(me, o);
    // Peers know us by the entry's MAC, and take frames from any other as a stranger's.
    HS_REQUIRE(e->mac() == list.peers[me].mac) << "raw: interface '" << o.iface << "' has MAC " << FormatMac(e->mac())
                                               << ", but this machine's entry (rank " << me << ") is '"
                                               << list.peers[me].text << "'";
    for (int r = 0; r < n; ++r)
      if (r != me) e->AddPeer(static_cast<PeerId>(r), list.peers[r].mac);
    if (!opt.multicast.empty()) e->AddGroup(0, group, true);
    return e;
  }
#ifdef HOGSTREAM_VERBS
  return OpenVerbs(list, me, opt);
#else
  HS_FAIL() << "verbs://: this hogstream was built without the verbs transport (install libibverbs-dev and "
               "rebuild), or use udp:// or raw://";
#endif
}

}  // namespace hogstream
