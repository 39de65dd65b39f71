// The transport registry (transport/registry.hpp): every backend folder's scheme is there (the
// test-only loop:// too, registered by its own folder alone), the url grammar asks it, and every
// registered scheme carries messages whole both ways through the factory: a scheme a host can
// run by itself opens its `loopback` url; raw (veth between namespaces, root) and verbs (the fake
// fabric) are given what they need here; any other scheme fails this test until it says how.
#include "transport/registry.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "test/error_of.hpp"
#include "test/transport/transport_test_util.hpp"
#include "test/transport/veth.hpp"
#ifdef HOGSTREAM_VERBS
#include "test/transport/verbs/fake_verbs.hpp"
#endif

namespace hogstream {
namespace {

std::vector<std::string> Names() {
  std::vector<std::string> names;
  for (const TransportScheme* s : Transports()) names.push_back(s->name);
  return names;
}

TEST(TransportRegistry, EveryBackendFolderRegistersItsScheme) {
  const std::vector<std::string> names = Names();
  for (const char* want : {"inproc", "loop", "raw", "udp", "verbs"})
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want << "://";
  EXPECT_EQ(FindTransport("tcp"), nullptr);
  EXPECT_EQ(TransportList(true), "raw://, udp:// or verbs://") << "loop:// and inproc:// name no machines";
  EXPECT_FALSE(FindTransport("loop")->machines);
  TransportScheme again;
  again.name = "udp";
  again.parse = [](const std::string&, const UrlRules&, PeerEntry*) { return std::string(); };
  again.text = [](const PeerEntry&) { return std::string(); };
  again.open_here = [](const PeerList&, const OpenOptions&) { return std::vector<std::unique_ptr<Transport>>(); };
  try {
    RegisterTransport(again);
    ADD_FAILURE() << "a second udp:// was taken";
  } catch (const Bug& bug) {
    EXPECT_NE(std::string(bug.what()).find("'udp' registered twice"), std::string::npos) << bug.what();
  }
}

TEST(TransportRegistry, TheUrlGrammarAsksTheSchemeItNames) {
  UrlRules here;
  here.here = true;
  const PeerList l = ParseTransportUrl("loop://a,b", here);
  EXPECT_EQ(l.scheme, "loop");
  ASSERT_EQ(l.peers.size(), 2u);
  EXPECT_EQ(PeerName(l, 1), "loop://b");
  EXPECT_NE(ErrorOf([&] { ParseTransportUrl("loop://a,a", here); }).find("are the same machine"), std::string::npos);
  EXPECT_NE(ErrorOf([&] { ParseTransportUrl("loop://A,b", here); }).find("lowercase letters"), std::string::npos);
  EXPECT_NE(ErrorOf([] { ParseTransportUrl("loop://a,b"); }).find("unknown scheme 'loop://'"), std::string::npos)
      << "a job's machines are never loop ends";
  OpenOptions one;
  one.rank = 0;
  EXPECT_NE(ErrorOf([&] { OpenTransport(l, one); }).find("'loop://a' is an end in this process"), std::string::npos);
}

// Two ends of `scheme` in this process, through the factory; "" where this host cannot (why).
std::vector<std::unique_ptr<Transport>> Ends(const TransportScheme& scheme, std::string* why) {
  OpenOptions o;
  o.job = 0x7e57;
  if (!scheme.loopback.empty()) return OpenTransports(scheme.loopback, o);
  if (scheme.name == "raw") {
    if (*why = test::TestNet::Unavailable(); !why->empty()) return {};
    static test::VethPair net(1500);
    o.netns = {net.ns(0), net.ns(1)};
    return OpenTransports("raw://%" + net.iface(0) + ",%" + net.iface(1), o);
  }
  if (scheme.name == "verbs") {
#ifdef HOGSTREAM_VERBS
    static FakeVerbs* fabric = new FakeVerbs();
    o.verbs_api = fabric->api();
    return OpenTransports("verbs://%fake0,%fake0:1", o);
#else
    EXPECT_NE(ErrorOf([&] { OpenTransports("verbs://%,%", o); }).find("built without the verbs transport"),
              std::string::npos);
    *why = "this build has no verbs (its scheme says so: checked)";
    return {};
#endif
  }
  ADD_FAILURE() << scheme.name << "://: no loopback url, and this test does not know how to open two of its ends";
  return {};
}

TEST(TransportRegistry, EveryRegisteredSchemeCarriesMessagesBothWays) {
  int ran = 0;
  for (const TransportScheme* scheme : Transports()) {
    SCOPED_TRACE(scheme->name + "://");
    std::string why;
    std::vector<std::unique_ptr<Transport>> t = Ends(*scheme, &why);
    if (!why.empty()) {
      std::cout << "[ SKIPPED  ] " << scheme->name << "://: " << why << "\n";
      continue;
    }
    ASSERT_EQ(t.size(), 2u);
    EXPECT_EQ(t[0]->self(), 0);
    EXPECT_EQ(t[1]->self(), 1);
    for (uint64_t seq = 1; seq <= 3; ++seq) {
      EXPECT_TRUE(test::Delivers(t[0].get(), Dest::Peer(1), t[1].get(), 10 * seq));
      EXPECT_TRUE(test::Delivers(t[1].get(), Dest::Peer(0), t[0].get(), 10 * seq + 1));
    }
    ++ran;
  }
  EXPECT_GE(ran, 3) << "inproc, loop and udp run on any host";
}

}  // namespace
}  // namespace hogstream
