// raw:// in the transport factory (transport/registry.hpp): MAC entries, one AF_PACKET socket
// per machine on the interface with that MAC, multicast group 0 on a group MAC.
#include <arpa/inet.h>
#include <ifaddrs.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

#include "base/common.hpp"
#include "transport/open_backend.hpp"
#include "transport/raw/endpoint.hpp"

namespace hogstream {

namespace {

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

std::unique_ptr<Transport> OpenRawMachine(const PeerList& list, const OpenOptions& o) {
  const std::optional<Mac> group = RawGroupOf(o);
  const size_t me = static_cast<size_t>(o.rank);
  auto e = MakeRaw(list, me, o, o.iface);
  for (size_t r = 0; r < list.peers.size(); ++r)
    if (r != me) e->AddPeer(static_cast<PeerId>(r), list.peers[r].mac);
  if (group) e->AddGroup(0, *group, GroupMember(o, me));
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
    if (group) ends[r]->AddGroup(0, *group, GroupMember(o, r));
  }
  for (auto& e : ends) out.push_back(std::move(e));
  return out;
}

// A rendezvous over raw: the MAC of the interface holding the address this machine reaches the
// store from.
std::string RawOwnEntry(const sockaddr_in& local, std::shared_ptr<void>*) {
  ifaddrs* all = nullptr;
  HS_REQUIRE(getifaddrs(&all) == 0) << "rendezvous: getifaddrs: " << std::strerror(errno);
  std::string name;
  for (ifaddrs* i = all; i; i = i->ifa_next)
    if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
        reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr == local.sin_addr.s_addr)
      name = i->ifa_name;
  freeifaddrs(all);
  for (const auto& [iface, mac] : ReadLocalAddresses().macs)
    if (iface == name) return FormatMac(mac);
  char ip[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &local.sin_addr, ip, sizeof ip);
  HS_FAIL() << "rendezvous: raw:// trains on the interface this machine reaches the store from (" << ip
            << ", interface '" << name << "'), which has no MAC";
}

TransportScheme RawScheme() {
  TransportScheme s;
  s.name = "raw";
  s.address = "MAC";
  s.parse = [](const std::string& body, const UrlRules& rules, PeerEntry* e) -> std::string {
    if (rules.here && body[0] == '%') {  // an end on interface IFACE, its MAC learnt when opened
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
  };
  s.text = [](const PeerEntry& e) { return e.local ? "raw://%" + e.iface : "raw://" + FormatMac(e.mac); };
  s.is_here = [](const PeerEntry& e, const LocalAddresses& local, std::string* iface) {
    for (const auto& [name, mac] : local.macs) {
      if (mac != e.mac) continue;
      if (iface) *iface = name;
      return true;
    }
    return false;
  };
  s.local_text = [](const LocalAddresses& local) {
    std::vector<std::string> have;
    for (const auto& [name, mac] : local.macs) have.push_back(name + " " + FormatMac(mac));
    return have;
  };
  s.leaves_host = [](const PeerEntry&) { return true; };
  s.own_entry = RawOwnEntry;
  s.open_machine = OpenRawMachine;
  s.open_here = OpenRawHere;
  return s;
}

}  // namespace

HS_REGISTER_TRANSPORT(raw, RawScheme())

}  // namespace hogstream
