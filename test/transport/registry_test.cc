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
#include "test/transport/registered_ends.hpp"
#include "test/transport/transport_test_util.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

TEST(TransportRegistry, EveryBackendFolderRegistersItsScheme) {
  const std::vector<std::string> names = test::RegisteredSchemes();
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

TEST(TransportRegistry, EveryRegisteredSchemeCarriesMessagesBothWays) {
  int ran = 0;
  for (const TransportScheme* scheme : Transports()) {
    SCOPED_TRACE(scheme->name + "://");
    std::string why;
    OpenOptions o;
    o.job = 0x7e57;
    std::vector<std::unique_ptr<Transport>> t = test::RegisteredEnds(*scheme, o, &why);
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
