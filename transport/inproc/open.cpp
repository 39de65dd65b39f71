// inproc:// in the transport factory (transport/registry.hpp): "inproc://[NAME]", the two ends
// of one link in this process over shared memory (tests, benches); never a job's machines.
#include "base/common.hpp"
#include "transport/inproc/device.hpp"
#include "transport/open_backend.hpp"

namespace hogstream {

namespace {

std::vector<std::unique_ptr<Transport>> OpenInprocPair(const PeerList&, const OpenOptions& o) {
  HS_REQUIRE(o.multicast.empty()) << "--multicast needs a network transport (" << TransportList(true) << ")";
  InprocOptions io;
  io.max_payload = o.max_payload ? o.max_payload : 32768;
  if (o.send_slots) io.slots = o.send_slots;
  auto [a, b] = InprocDevice::MakePair(io);
  std::vector<std::unique_ptr<Transport>> out;
  out.push_back(std::move(a));
  out.push_back(std::move(b));
  return out;
}

TransportScheme InprocScheme() {
  TransportScheme s;
  s.name = "inproc";
  s.address = "[NAME]";
  s.machines = false;
  s.whole = [](const std::string& url, const UrlRules& rules) {
    HS_REQUIRE(url.find_first_of(", \t\r\n#") == std::string::npos)
        << rules.flag << ": '" << url << "': inproc://[NAME] names one link of two ends, not a list";
    PeerList list;
    list.scheme = "inproc";
    PeerEntry e;
    e.text = url;
    e.local = true;
    list.peers = {e, e};
    return list;
  };
  s.parse = [](const std::string&, const UrlRules& rules, PeerEntry* e) -> std::string {
    HS_FAIL() << rules.flag << ": '" << e->text << "': inproc://[NAME] is a url of its own (two ends), not a list";
  };
  s.text = [](const PeerEntry& e) { return e.text; };
  s.open_here = OpenInprocPair;
  s.loopback = "inproc://conformance";
  return s;
}

}  // namespace

HS_REGISTER_TRANSPORT(inproc, InprocScheme())

}  // namespace hogstream
