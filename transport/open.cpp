// The transport factory: urls parsed, this host's addresses, the url's scheme asked to open its
// endpoints (see open.hpp; each scheme's own code is in transport/<x>/open.cpp).
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

#include "base/common.hpp"
#include "transport/netns.hpp"
#include "transport/open_backend.hpp"

namespace hogstream {

// ---------------------------------------------------------------- urls

namespace {

std::string Trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  return b == std::string::npos ? "" : s.substr(b, s.find_last_not_of(" \t\r") + 1 - b);
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
// address that is left. A scheme that names no machines (inproc) only where rules.here.
std::string SchemeAndBody(const PeerEntry& e, size_t r, const UrlRules& rules, PeerList* list) {
  const size_t s = e.text.find("://");
  if (s == std::string::npos) {
    HS_REQUIRE(r > 0) << rules.flag << ": '" << e.text << "' has no scheme (want " << TransportList(!rules.here)
                      << ", like udp://HOST:PORT,...)";
    return e.text;
  }
  const std::string scheme = e.text.substr(0, s);
  const TransportScheme* known = FindTransport(scheme);
  HS_REQUIRE(known && (known->machines || rules.here))
      << rules.flag << ": unknown scheme '" << scheme << "://' in '" << e.text << "' (want "
      << TransportList(!rules.here) << ")";
  HS_REQUIRE(r == 0 || scheme == list->scheme) << rules.flag << ": '" << e.text << "' is " << scheme
                                               << ":// but the list is " << list->scheme << "://";
  list->scheme = scheme;
  return e.text.substr(s + 3);
}

}  // namespace

PeerList ParseTransportUrl(const std::string& url, const UrlRules& rules) {
  if (const size_t s = url.find("://"); s != std::string::npos && url[0] != '@') {
    const TransportScheme* scheme = FindTransport(url.substr(0, s));
    if (scheme && scheme->whole && rules.here) return scheme->whole(url, rules);  // a url of its own
  }
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
    const std::string identity = FindTransport(list.scheme)->parse(body, rules, &e);
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
  const TransportScheme* s = FindTransport(list.scheme);
  HS_CHECK(s) << "no transport scheme '" << list.scheme << "'";
  return s->text(list.peers[r]);
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

// ---------------------------------------------------------------- for the backends

int ParsePort(const std::string& s) {
  if (s.empty() || s.size() > 5 || s.find_first_not_of("0123456789") != std::string::npos) return -1;
  const long p = std::strtol(s.c_str(), nullptr, 10);
  return p <= 65535 ? static_cast<int>(p) : -1;
}

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

const std::string& NetnsOf(const OpenOptions& o, size_t r) {
  static const std::string kHere;
  if (o.netns.empty()) return kHere;
  HS_CHECK(o.netns.size() == 1 || r < o.netns.size()) << "OpenOptions::netns has no entry for rank " << r;
  return o.netns.size() == 1 ? o.netns[0] : o.netns[r];
}

bool GroupMember(const OpenOptions& o, size_t r) {
  return o.group_members.empty() ||
         std::find(o.group_members.begin(), o.group_members.end(), static_cast<PeerId>(r)) != o.group_members.end();
}

bool HasAddress(const LocalAddresses& local, const std::string& ip) {
  return std::find(local.ipv4.begin(), local.ipv4.end(), ip) != local.ipv4.end();
}

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

std::string InterfaceWithMac(const Mac& mac, const std::string& netns) {
  for (const auto& [name, m] : ReadLocalAddresses(netns).macs)
    if (m == mac) return name;
  return "";
}

// ---------------------------------------------------------------- opening

namespace {

std::atomic<uint64_t> g_opened{0};

const TransportScheme& SchemeOf(const PeerList& list) {
  const TransportScheme* s = FindTransport(list.scheme);
  HS_REQUIRE(s) << "no transport scheme '" << list.scheme << "' in this build (want " << TransportList(false) << ")";
  return *s;
}

}  // namespace

std::unique_ptr<Transport> OpenTransport(const PeerList& list, const OpenOptions& o) {
  const int n = static_cast<int>(list.peers.size());
  HS_CHECK(o.rank >= 0 && o.rank < n) << "OpenTransport: rank " << o.rank << " of " << n << " entries";
  const TransportScheme& s = SchemeOf(list);
  HS_REQUIRE(s.machines && s.open_machine)
      << "'" << list.peers[0].text << "' is an end in this process: open the url's ends together (OpenTransports)";
  for (const PeerEntry& e : list.peers) {
    HS_REQUIRE(!e.local && !(!e.ip.empty() && e.port == 0))
        << "'" << e.text << "' is an end in this process: open the url's ends together (OpenTransports)";
  }
  std::unique_ptr<Transport> t = s.open_machine(list, o);
  g_opened.fetch_add(1, std::memory_order_relaxed);
  return t;
}

std::unique_ptr<Transport> OpenTransport(const std::string& url, const OpenOptions& o) {
  return OpenTransport(ParseTransportUrl(url), o);
}

std::vector<std::unique_ptr<Transport>> OpenTransports(const PeerList& list, const OpenOptions& o) {
  HS_CHECK(!list.peers.empty()) << "OpenTransports: an empty list";
  std::vector<std::unique_ptr<Transport>> ends = SchemeOf(list).open_here(list, o);
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
