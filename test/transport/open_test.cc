// transport/open: the factory's url grammar (every form parsed; every kind of mistake one
// Error line naming the url's flag and the entry), and the endpoints it opens talking to each
// other: an inproc pair, a udp pair on kernel-picked ports (unicast and group 0 to its members
// only), one end of a udp job per OpenTransport, and, where test networks can be made (root),
// a raw pair on the two ends of a veth link named by interface; a verbs pair on the fake fabric.
// Not for: --peers' own rules and finding this machine (test/bin/peers_test.cc), the bench
// (test/bench/link_bench_test.cc), the backends themselves (their folders' tests).
// Threads: each test runs on gtest's thread, which is every endpoint's sender and receiver.
#include "transport/open.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "test/error_of.hpp"
#include "test/transport/transport_test_util.hpp"
#include "test/transport/veth.hpp"
#ifdef HOGSTREAM_VERBS
#include "test/transport/verbs/fake_verbs.hpp"
#endif

namespace hogstream {
namespace HS_UNITY_ID {

using Clock = std::chrono::steady_clock;

PeerList Here(const std::string& url) {
  UrlRules rules;
  rules.here = true;
  return ParseTransportUrl(url, rules);
}

using test::Delivers;

// ---------------------------------------------------------------- urls

TEST(OpenUrl, EveryFormParses) {
  PeerList l = ParseTransportUrl("udp://127.0.0.1:9000,localhost:9001 solvers=2 private iface=eth1");
  EXPECT_EQ(l.scheme, "udp");
  ASSERT_EQ(l.peers.size(), 2u);
  EXPECT_EQ(l.peers[1].ip, "127.0.0.1");
  EXPECT_EQ(l.peers[1].iface, "eth1");
  EXPECT_TRUE(l.peers[1].private_copies);
  EXPECT_EQ(PeerName(l, 1), "udp://127.0.0.1:9001");
  l = ParseTransportUrl("raw://0025908a56d8,00:25:90:8A:56:D9");
  EXPECT_EQ(l.peers[1].mac, (Mac{0x00, 0x25, 0x90, 0x8a, 0x56, 0xd9}));
  EXPECT_EQ(l.scheme, std::string("raw"));
  l = ParseTransportUrl("verbs://127.0.0.1:7100,verbs://127.0.0.1:7101");
  EXPECT_EQ(PeerName(l, 1), "verbs://127.0.0.1:7101");
  // Ends in this process: kernel-picked ports, interfaces, devices, an inproc pair.
  l = Here("udp://127.0.0.1:0,127.0.0.1:0");
  EXPECT_EQ(l.peers[1].port, 0) << "two entries on port 0 are not the same machine";
  l = Here("raw://%va,%vb");
  EXPECT_TRUE(l.peers[0].local);
  EXPECT_EQ(l.peers[1].iface, "vb");
  EXPECT_EQ(PeerName(l, 0), "raw://%va");
  l = Here("verbs://%mlx5_0:2,%");
  EXPECT_EQ(l.peers[0].iface, "mlx5_0:2");
  EXPECT_EQ(l.peers[1].iface, "") << "the first device";
  l = Here("inproc://link");
  EXPECT_EQ(l.scheme, "inproc");
  EXPECT_EQ(l.peers.size(), 2u);
  EXPECT_EQ(Here("inproc://").peers.size(), 2u);
}

TEST(OpenUrl, AFileHoldsTheList) {
  const std::string path = (std::filesystem::temp_directory_path() / ("hs-open-" + std::to_string(getpid()))).string();
  std::ofstream(path) << "# two machines\nudp://127.0.0.1:9000\n127.0.0.1:9001  # the second\n";
  const PeerList l = ParseTransportUrl("@" + path);
  std::remove(path.c_str());
  ASSERT_EQ(l.peers.size(), 2u);
  EXPECT_EQ(l.peers[1].port, 9001);
}

TEST(OpenUrl, EachMistakeIsOneLineNamingTheEntry) {
  struct Case {
    std::string url;
    bool here;
    std::string names;
  };
  const Case cases[] = {
      {"tcp://127.0.0.1:9000", false,
       "url: unknown scheme 'tcp://' in 'tcp://127.0.0.1:9000' (want raw://, udp:// or verbs://)"},
      {"tcp://127.0.0.1:9000", true, "(want inproc://, "},  // (every registered scheme, by name)
      {"inproc://x", false, "unknown scheme 'inproc://'"},
      {"127.0.0.1:9000", false, "'127.0.0.1:9000' has no scheme"},
      {"", false, "url names no machine"},
      {"udp://", false, "'udp://' names no machine"},
      {"udp://127.0.0.1", false, "'udp://127.0.0.1' is not HOST:PORT"},
      {"udp://127.0.0.1:0", false, "bad port in 'udp://127.0.0.1:0' (want 1..65535)"},
      {"udp://127.0.0.1:70000", true, "bad port in 'udp://127.0.0.1:70000' (want 0..65535)"},
      {"udp://no-such-host.invalid:1", false, "cannot resolve 'no-such-host.invalid'"},
      {"udp://127.0.0.1:1,localhost:1", false, "'udp://127.0.0.1:1' and 'localhost:1' are the same machine"},
      {"udp://127.0.0.1:1,raw://0025908a56d8", false, "'raw://0025908a56d8' is raw:// but the list is udp://"},
      {"udp://127.0.0.1:1 slots=4", false, "'slots=4' in 'udp://127.0.0.1:1 slots=4' is not a machine setting"},
      {"raw://0025908a56", false, "'0025908a56' is not a MAC address"},
      {"raw://%eth0", false, "'%eth0' is not a MAC address"},
      {"raw://%", true, "'raw://%' names no interface"},
      {"raw://%va,%va", true, "'raw://%va' and '%va' are the same machine"},
      {"verbs://127.0.0.1:7", true, "'verbs://127.0.0.1:7': an end in this process is %[DEVICE[:PORT]]"},
      {"verbs://%mlx5_0", false, "'verbs://%mlx5_0' is not HOST:PORT"},
      {"inproc://a,b", true, "'inproc://a,b': inproc://[NAME] names one link of two ends, not a list"},
      {"@/nonexistent/hosts", false, "url=@/nonexistent/hosts: cannot read /nonexistent/hosts"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.url + (c.here ? " (here)" : ""));
    UrlRules rules;
    rules.here = c.here;
    const std::string e = ErrorOf([&] { ParseTransportUrl(c.url, rules); });
    EXPECT_NE(e.find(c.names), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << "one line: " << e;
  }
  UrlRules peers;
  peers.flag = "--peers";
  const std::string e = ErrorOf([&] { ParseTransportUrl("udp://127.0.0.1", peers); });
  EXPECT_EQ(e.rfind("--peers: ", 0), 0u) << "named by the flag the url came in: " << e;
}

TEST(OpenUrl, WhatOnlyAnEndHereCanBeIsRefusedForOneEnd) {
  OpenOptions o;
  o.rank = 0;
  std::string e = ErrorOf([&] { OpenTransport(Here("udp://127.0.0.1:0,127.0.0.1:0"), o); });
  EXPECT_NE(e.find("'udp://127.0.0.1:0' is an end in this process"), std::string::npos) << e;
  e = ErrorOf([&] { OpenTransport(Here("inproc://x"), o); });
  EXPECT_NE(e.find("is an end in this process"), std::string::npos) << e;
  e = ErrorOf([&] { OpenTransport("raw://%eth0", o); });
  EXPECT_NE(e.find("is not a MAC address"), std::string::npos) << e;
  o.multicast = "on";
  e = ErrorOf([&] { OpenTransports("inproc://x", o); });
  EXPECT_NE(e.find("--multicast needs a network transport"), std::string::npos) << e;
  o.multicast = "239.1.2.3";  // no port
  e = ErrorOf([&] { OpenTransports("udp://127.0.0.1:0,127.0.0.1:0", o); });
  EXPECT_NE(e.find("--multicast=239.1.2.3: want GROUP:PORT"), std::string::npos) << e;
}

// ---------------------------------------------------------------- endpoints

TEST(OpenTransports, InprocPairTalksAndCounts) {
  const uint64_t before = TransportsOpened();
  OpenOptions o;
  std::vector<std::unique_ptr<Transport>> t = OpenTransports("inproc://pair", o);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(TransportsOpened(), before + 2);
  EXPECT_EQ(t[0]->caps().max_payload, 32768u) << "inproc's default";
  EXPECT_TRUE(Delivers(t[0].get(), Dest::Peer(1), t[1].get(), 1));
  EXPECT_TRUE(Delivers(t[1].get(), Dest::Peer(0), t[0].get(), 2));
  o.max_payload = 1024;
  EXPECT_EQ(OpenTransports("inproc://", o)[1]->caps().max_payload, 1024u);
}

TEST(OpenTransports, UdpPairOnKernelPortsTalksAndGroupReachesMembersOnly) {
  OpenOptions o;
  o.job = 0x0de4;
  o.multicast = "239.77." + std::to_string(getpid() % 250 + 1) + ".9:" + std::to_string(40000 + getpid() % 20000);
  o.group_members = {1};
  std::vector<std::unique_ptr<Transport>> t;
  try {
    t = OpenTransports("udp://127.0.0.1:0,127.0.0.1:0", o);
  } catch (const Error& e) {
    if (std::string(e.what()).find("could not join") == std::string::npos) throw;
    GTEST_SKIP() << "the kernel refused multicast on lo: " << e.what();
  }
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0]->caps().max_payload, 32768u) << "loopback's MTU (64 KiB) carries 32 KiB unfragmented";
  EXPECT_TRUE(Delivers(t[0].get(), Dest::Peer(1), t[1].get(), 3));
  EXPECT_TRUE(Delivers(t[1].get(), Dest::Peer(0), t[0].get(), 4));
  EXPECT_TRUE(Delivers(t[0].get(), Dest::Group(0), t[1].get(), 5));
  EXPECT_FALSE(Delivers(t[1].get(), Dest::Group(0), t[0].get(), 6, std::chrono::milliseconds(500)))
      << "rank 0 is no member";
}

using test::FreeUdpPorts;

// The machines of one job, each opened by its own call from the same url (here two in one
// process): every other entry is its peer, the payload asked for is the one it carries.
TEST(OpenTransport, EachMachineOpensItsOwnEndFromTheSameUrl) {
  const std::vector<uint16_t> ports = FreeUdpPorts(2);
  const std::string url = "udp://127.0.0.1:" + std::to_string(ports[0]) + ",localhost:" + std::to_string(ports[1]);
  std::unique_ptr<Transport> t[2];
  for (int r = 0; r < 2; ++r) {
    OpenOptions o;
    o.rank = r;
    o.job = 0x0de5;
    o.max_payload = 4096;
    t[r] = OpenTransport(url, o);
    EXPECT_EQ(t[r]->self(), r);
    EXPECT_EQ(t[r]->caps().max_payload, 4096u);
  }
  EXPECT_TRUE(Delivers(t[0].get(), Dest::Peer(1), t[1].get(), 7));
  EXPECT_TRUE(Delivers(t[1].get(), Dest::Peer(0), t[0].get(), 8));
  OpenOptions o;
  o.rank = 0;
  o.multicast = "224.0.0.1:9000";  // not 239/8: refused before any socket is bound
  const std::string e = ErrorOf([&] { OpenTransport(url, o); });
  EXPECT_NE(e.find("--multicast=224.0.0.1:9000"), std::string::npos) << e;
}

// Raw Ethernet on the two ends of a veth link, named by interface (root only): the MACs are
// learnt when opened, the payload is the most one frame of the MTU carries, group 0 reaches
// its member.
TEST(OpenTransports, RawPairByInterfaceOverVeth) {
  if (const std::string why = test::TestNet::Unavailable(); !why.empty()) GTEST_SKIP() << why;
  test::VethPair net(9000);
  OpenOptions o;
  o.job = 0x0de6;
  o.netns = {net.ns(0), net.ns(1)};
  o.multicast = "on";
  o.group_members = {1};
  std::vector<std::unique_ptr<Transport>> t = OpenTransports("raw://%" + net.iface(0) + ",%" + net.iface(1), o);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0]->caps().max_payload, 8944u) << "MTU 9000 (see raw/endpoint.hpp)";
  EXPECT_TRUE(Delivers(t[0].get(), Dest::Peer(1), t[1].get(), 9));
  EXPECT_TRUE(Delivers(t[1].get(), Dest::Peer(0), t[0].get(), 10));
  EXPECT_TRUE(Delivers(t[0].get(), Dest::Group(0), t[1].get(), 11));
  o.max_payload = 9008;
  const std::string e = ErrorOf([&] { OpenTransports("raw://%" + net.iface(0) + ",%" + net.iface(1), o); });
  EXPECT_NE(e.find("does not fit the MTU 9000"), std::string::npos) << e;
}

#ifdef HOGSTREAM_VERBS
TEST(OpenTransports, VerbsPairOnOneFakeDevice) {
  FakeVerbs fabric;
  OpenOptions o;
  o.job = 0x0de7;
  o.verbs_api = fabric.api();
  std::vector<std::unique_ptr<Transport>> t = OpenTransports("verbs://%fake0,%fake0:1", o);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_TRUE(Delivers(t[0].get(), Dest::Peer(1), t[1].get(), 12));
  EXPECT_TRUE(Delivers(t[1].get(), Dest::Peer(0), t[0].get(), 13));
  EXPECT_GE(fabric.stats().delivered, 2u) << "over verbs";
  const std::string e = ErrorOf([&] { OpenTransports("verbs://%fake9,%fake9", o); });
  EXPECT_NE(e.find("fake9"), std::string::npos) << e;
  o.multicast = "on";
  EXPECT_NE(ErrorOf([&] { OpenTransports("verbs://%,%", o); }).find("verbs: --multicast"), std::string::npos);
}
#endif

}  // namespace
}  // namespace hogstream
