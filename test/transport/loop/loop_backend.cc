// A test-only transport scheme, registered from its own folder and nothing else: loop://A,B are
// two ends in this process, A's messages B's and back, over an in-process pair. It shows what
// adding a backend takes (transport/registry.hpp): this file; no other file names it.
#include "base/common.hpp"
#include "transport/inproc/device.hpp"
#include "transport/open_backend.hpp"

namespace hogstream {
namespace {

TransportScheme LoopScheme() {
  TransportScheme s;
  s.name = "loop";
  s.address = "NAME";
  s.machines = false;  // both ends live in one process
  s.parse = [](const std::string& body, const UrlRules& rules, PeerEntry* e) -> std::string {
    HS_REQUIRE(body.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789") == std::string::npos)
        << rules.flag << ": '" << e->text << "': a loop end is named by lowercase letters and digits";
    e->local = true;
    e->iface = body;
    return body;  // two ends of one name are one end
  };
  s.text = [](const PeerEntry& e) { return "loop://" + e.iface; };
  s.open_here = [](const PeerList& list, const OpenOptions& o) {
    HS_REQUIRE(list.peers.size() == 2) << "loop:// joins two ends, not " << list.peers.size();
    HS_REQUIRE(o.multicast.empty()) << "loop:// has no group";
    InprocOptions io;
    io.max_payload = o.max_payload ? o.max_payload : 4096;
    if (o.send_slots) io.slots = o.send_slots;
    auto [a, b] = InprocDevice::MakePair(io);
    std::vector<std::unique_ptr<Transport>> out;
    out.push_back(std::move(a));
    out.push_back(std::move(b));
    return out;
  };
  s.loopback = "loop://a,b";
  return s;
}

}  // namespace
}  // namespace hogstream

HS_REGISTER_TRANSPORT(loop, ::hogstream::LoopScheme())
