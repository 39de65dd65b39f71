// Two ends of any registered scheme (registered_ends.hpp).
#include "test/transport/registered_ends.hpp"

#include <gtest/gtest.h>

#include <algorithm>

#include "test/error_of.hpp"
#include "test/transport/veth.hpp"
#include "transport/frame.hpp"
#ifdef HOGSTREAM_VERBS
#include "test/transport/verbs/fake_verbs.hpp"
#endif

namespace hogstream::test {

std::vector<std::string> RegisteredSchemes() {
  std::vector<std::string> names;
  for (const TransportScheme* s : Transports()) names.push_back(s->name);
  return names;
}

std::vector<std::unique_ptr<Transport>> RegisteredEnds(const TransportScheme& scheme, OpenOptions o,
                                                       std::string* why) {
  why->clear();
  if (!scheme.loopback.empty()) return OpenTransports(scheme.loopback, o);
  if (scheme.name == "raw") {
    if (*why = TestNet::Unavailable(); !why->empty()) return {};
    static VethPair net(9000);  // one pair for the process (a jumbo MTU: the suite sends 4 KiB)
    o.netns = {net.ns(0), net.ns(1)};
    return OpenTransports("raw://%" + net.iface(0) + ",%" + net.iface(1), o);
  }
  if (scheme.name == "verbs") {
#ifdef HOGSTREAM_VERBS
    static FakeVerbs* fabric = new FakeVerbs();  // the process's fabric, for its whole life
    o.verbs_api = fabric->api();
    // The fake port's MTU is 4 KiB: a larger message is the factory's one-line Error.
    const uint32_t limit = static_cast<uint32_t>((4096 - FrameFormat(o.job).overhead()) / 16 * 16);
    if (o.max_payload) o.max_payload = std::min(o.max_payload, limit);
    return OpenTransports("verbs://%fake0,%fake0:1", o);
#else
    EXPECT_NE(ErrorOf([&] { OpenTransports("verbs://%,%", o); }).find("built without the verbs transport"),
              std::string::npos);
    *why = "this build has no verbs (its scheme says so: checked)";
    return {};
#endif
  }
  ADD_FAILURE() << scheme.name << "://: no loopback url, and test/transport/registered_ends.cc does not know "
                << "how to open two of its ends";
  return {};
}

}  // namespace hogstream::test
