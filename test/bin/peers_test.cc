// bin/peers: every --peers form parsed (and every kind of mistake a one-line Error naming the
// entry), this machine found by each rule from fed addresses and launcher variables, and real
// endpoints opened from a list: two UDP ranks on 127.0.0.1 talking both ways (unicast and a
// 239.x group), three verbs ranks (on the fake fabric) that trade their queue pair addresses
// over UDP and then talk over verbs, and, where test networks can be made (root), raw Ethernet and UDP between two
// namespaces on a veth pair, each end finding itself from its own namespace's addresses.
#include "test/error_of.hpp"
#include "bin/peers.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "base/common.hpp"
#include "test/test_seed.hpp"
#include "test/transport/transport_test_util.hpp"
#include "test/transport/veth.hpp"
#include "transport/udp/device.hpp"
#ifdef HOGSTREAM_VERBS
#include "test/transport/verbs/fake_verbs.hpp"
#endif

namespace hogstream {
namespace HS_UNITY_ID {

using Clock = std::chrono::steady_clock;
using Env = std::map<std::string, std::string>;

// A file holding `text`, removed when the test ends (passed or not).
struct TempFile {
  explicit TempFile(const std::string& text)
      : path((std::filesystem::temp_directory_path() /
              ("hogstream-peers-" + std::to_string(getpid()) + "-" + std::to_string(TestSeed())))
                 .string()) {
    std::ofstream(path) << text;
  }
  ~TempFile() { std::remove(path.c_str()); }
  const std::string path;
};

using test::FreeUdpPorts;

using test::Delivers;

// ---------------------------------------------------------------- parsing

TEST(PeersParse, UdpHostsResolveAndKeepTheirText) {
  const PeerList l = ParsePeers("udp://127.0.0.1:9000,localhost:9001");
  EXPECT_EQ(l.scheme, "udp");
  ASSERT_EQ(l.peers.size(), 2u);
  EXPECT_EQ(l.peers[0].text, "udp://127.0.0.1:9000");
  EXPECT_EQ(l.peers[1].text, "localhost:9001");
  EXPECT_EQ(l.peers[1].ip, "127.0.0.1") << "localhost resolved (getaddrinfo, IPv4)";
  EXPECT_EQ(l.peers[0].port, 9000);
  EXPECT_EQ(l.peers[1].port, 9001);
  EXPECT_EQ(PeerName(l, 1), "udp://127.0.0.1:9001");
  EXPECT_EQ(ParsePeers("udp://127.0.0.1:65535").peers.size(), 1u) << "one machine is a list";
}

TEST(PeersParse, RawTakesBothMacSpellings) {
  const PeerList l = ParsePeers("raw://0025908a56d8,00:25:90:8A:56:D9");
  EXPECT_EQ(l.scheme, "raw");
  ASSERT_EQ(l.peers.size(), 2u);
  EXPECT_EQ(l.peers[0].mac, (Mac{0x00, 0x25, 0x90, 0x8a, 0x56, 0xd8}));
  EXPECT_EQ(l.peers[1].mac, (Mac{0x00, 0x25, 0x90, 0x8a, 0x56, 0xd9}));
  EXPECT_EQ(PeerName(l, 0), "raw://00:25:90:8a:56:d8");
}

TEST(PeersParse, VerbsEntriesAreWhereEachMachineTradesItsAddress) {
  const PeerList l = ParsePeers("verbs://127.0.0.1:7100,localhost:7101");
  EXPECT_EQ(l.scheme, "verbs");
  ASSERT_EQ(l.peers.size(), 2u);
  EXPECT_EQ(l.peers[1].ip, "127.0.0.1");
  EXPECT_EQ(l.peers[1].port, 7101);
  EXPECT_EQ(PeerName(l, 1), "verbs://127.0.0.1:7101");
}

// A topology file: each machine's line may carry its own settings after the address.
TEST(PeersParse, EntriesCarryTheirMachinesOwnSettings) {
  TempFile f("udp://127.0.0.1:7101  solvers=2 private  # the big one\n"
             "127.0.0.1:7102\n"
             "127.0.0.1:7103 iface=eth1 solvers=0:3\n");
  const PeerList l = ParsePeers("@" + f.path);
  ASSERT_EQ(l.peers.size(), 3u);
  EXPECT_EQ(l.peers[0].text, "udp://127.0.0.1:7101");
  EXPECT_EQ(l.peers[0].solvers, "2");
  EXPECT_TRUE(l.peers[0].private_copies);
  EXPECT_EQ(l.peers[1].solvers, "");
  EXPECT_FALSE(l.peers[1].private_copies);
  EXPECT_EQ(l.peers[2].iface, "eth1");
  EXPECT_EQ(l.peers[2].solvers, "0:3");
  for (const char* bad : {"udp://127.0.0.1:1 slots=4", "udp://127.0.0.1:1 solvers=", "udp://127.0.0.1:1 privat"}) {
    const std::string e = ErrorOf([&] { ParsePeers(bad); });
    EXPECT_NE(e.find("is not a machine setting"), std::string::npos) << e;
    EXPECT_NE(e.find(std::string("'") + bad + "'"), std::string::npos) << "names the entry: " << e;
  }
}

TEST(PeersParse, FileWithCommentsNewlinesAndRepeatedScheme) {
  TempFile f(
      "# the machines of this job\n"
      "udp://127.0.0.1:9000, 127.0.0.1:9001   # two on this host\n"
      "\n"
      "  udp://localhost:9002\r\n"
      "127.0.0.2:9003,\n");
  const PeerList l = ParsePeers("@" + f.path);
  ASSERT_EQ(l.peers.size(), 4u);
  EXPECT_EQ(l.peers[1].port, 9001);
  EXPECT_EQ(l.peers[2].text, "udp://localhost:9002");
  EXPECT_EQ(l.peers[2].ip, "127.0.0.1");
  EXPECT_EQ(l.peers[3].ip, "127.0.0.2");
  TempFile raw("raw://0025908a56d8\n00:25:90:8a:56:d9 # rank 1\nraw://0025908a56da\n");
  EXPECT_EQ(ParsePeers("@" + raw.path).peers.size(), 3u);
}

TEST(PeersParse, EachMistakeIsAnErrorNamingTheEntry) {
  struct Case {
    std::string spec, names;
  };
  const Case cases[] = {
      {"tcp://127.0.0.1:9000", "tcp://"},                                   // unknown scheme
      {"127.0.0.1:9000", "'127.0.0.1:9000' has no scheme"},                 // no scheme
      {"", "names no machine"},                                             // empty
      {" # nothing\n,,", "names no machine"},                               // only blanks
      {"udp://", "'udp://' names no machine"},                              // a scheme alone
      {"udp://no-such-host.invalid:9000", "no-such-host.invalid"},          // does not resolve
      {"udp://127.0.0.1:9000,127.0.0.1", "'127.0.0.1' is not HOST:PORT"},   // missing port
      {"udp://127.0.0.1:0", "bad port in 'udp://127.0.0.1:0'"},             // port 0
      {"udp://127.0.0.1:65536", "bad port in 'udp://127.0.0.1:65536'"},     // port too big
      {"udp://127.0.0.1:90x", "bad port in 'udp://127.0.0.1:90x'"},         // not a number
      {"raw://0025908a56d8,0025908a56", "'0025908a56'"},                    // MAC too short
      {"raw://00-25-90-8a-56-d8", "'00-25-90-8a-56-d8'"},                   // MAC spelled wrong
      {"udp://127.0.0.1:9000,raw://0025908a56d8", "'raw://0025908a56d8' is raw://"},  // schemes
      {"udp://127.0.0.1:9000,localhost:9000", "'udp://127.0.0.1:9000' and 'localhost:9000'"},
      {"raw://0025908a56d8,00:25:90:8a:56:d8", "'raw://0025908a56d8' and '00:25:90:8a:56:d8'"},
      {"verbs://127.0.0.1:7,localhost:7", "'verbs://127.0.0.1:7' and 'localhost:7'"},
      {"verbs://node1/mlx5_0", "'verbs://node1/mlx5_0' is not HOST:PORT"},
      {"@/nonexistent/peers.txt", "cannot read /nonexistent/peers.txt"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.spec);
    const std::string e = ErrorOf([&] { ParsePeers(c.spec); });
    EXPECT_NE(e.find(c.names), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << "one line: " << e;
  }
}

TEST(PeersParse, AtMost65534Machines) {
  std::string spec = "verbs://127.0.0.1:1";
  for (size_t r = 1; r < kMaxPeers; ++r) spec.append(",127.0.0.1:").append(std::to_string(r + 1));
  EXPECT_EQ(ParsePeers(spec).peers.size(), kMaxPeers);
  const std::string e = ErrorOf([&] { ParsePeers(spec + ",x"); });
  EXPECT_NE(e.find("65535 machines, more than 65534"), std::string::npos) << e;
}

TEST(PeersParse, RawBinPositionalForm) {
  PeerList l = ParseRawBinPeers("0025908a56d8:0025908a56d9:0025908A56DA");
  EXPECT_EQ(l.scheme, "raw");
  ASSERT_EQ(l.peers.size(), 3u);
  EXPECT_EQ(l.peers[2].mac, (Mac{0x00, 0x25, 0x90, 0x8a, 0x56, 0xda}));
  l = ParseRawBinPeers("raw://00:25:90:8a:56:d8,00:25:90:8a:56:d9");
  EXPECT_EQ(l.peers.size(), 2u);
  std::string e = ErrorOf([] { ParseRawBinPeers("00:25:90:8a:56:d8"); });
  EXPECT_NE(e.find("'00' is not a MAC of 12 hex digits"), std::string::npos) << e;
  e = ErrorOf([] { ParseRawBinPeers("0025908a56d8:0025908a56zz"); });
  EXPECT_NE(e.find("'0025908a56zz'"), std::string::npos) << e;
  e = ErrorOf([] { ParseRawBinPeers("0025908a56d8:0025908a56d8"); });
  EXPECT_NE(e.find("same machine"), std::string::npos) << e;
  e = ErrorOf([] { ParseRawBinPeers("udp://127.0.0.1:9000"); });
  EXPECT_NE(e.find("not raw://"), std::string::npos) << e;
}

// ---------------------------------------------------------------- which machine am I

TEST(PeersFindSelf, TheOneLocalEntryDecides) {
  const PeerList udp = ParsePeers("udp://10.9.0.1:9000,10.9.0.2:9000");
  LocalAddresses local{{"127.0.0.1", "10.9.0.2"}, {}};
  SelfRank s = FindSelf(udp, local, {});
  EXPECT_EQ(s.rank, 1);
  EXPECT_EQ(s.iface, "");
  // The list decides over a launcher's numbering (mpirun's rank 0 may be the list's rank 1).
  s = FindSelf(udp, local, {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}});
  EXPECT_EQ(s.rank, 1);
  EXPECT_EQ(s.how, "the only local entry");
  const PeerList raw = ParsePeers("raw://0025908a56d8,0025908a56d9,0025908a56da");
  local = {{}, {{"eth0", ParseMac("aabbccddeeff")}, {"eth3", ParseMac("0025908a56da")}}};
  s = FindSelf(raw, local, {});
  EXPECT_EQ(s.rank, 2);
  EXPECT_EQ(s.iface, "eth3") << "the interface whose MAC is the entry";
}

TEST(PeersFindSelf, RankFlagWinsAndIsRangeChecked) {
  const PeerList l = ParsePeers("raw://0025908a56d8,0025908a56d9");
  const LocalAddresses local{{}, {{"eth1", ParseMac("0025908a56d9")}}};
  const Env env{{"RANK", "1"}, {"WORLD_SIZE", "2"}};
  SelfRank s = FindSelf(l, local, env, 0);
  EXPECT_EQ(s.rank, 0);
  EXPECT_EQ(s.how, "--rank");
  EXPECT_EQ(s.iface, "") << "rank 0's MAC is on no interface here";
  EXPECT_EQ(FindSelf(l, local, env, 1).iface, "eth1");
  const std::string e = ErrorOf([&] { FindSelf(l, local, env, 2); });
  EXPECT_NE(e.find("--rank=2 is out of range"), std::string::npos) << e;
  EXPECT_NE(e.find("2 machines"), std::string::npos) << e;
}

TEST(PeersFindSelf, EachLauncherDecidesAmongSeveralLocalEntries) {
  const PeerList l = ParsePeers("udp://127.0.0.1:9000,127.0.0.1:9001,127.0.0.1:9002");
  const LocalAddresses local{{"127.0.0.1"}, {}};
  const std::pair<const char*, const char*> launchers[] = {{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                                           {"PMI_RANK", "PMI_SIZE"},
                                                           {"SLURM_PROCID", "SLURM_NTASKS"},
                                                           {"RANK", "WORLD_SIZE"}};
  for (const auto& [rank, size] : launchers) {
    SCOPED_TRACE(rank);
    const SelfRank s = FindSelf(l, local, {{rank, "2"}, {size, "3"}});
    EXPECT_EQ(s.rank, 2);
    EXPECT_EQ(s.how, rank);
    const std::string e = ErrorOf([&] { FindSelf(l, local, {{rank, "1"}, {size, "4"}}); });
    EXPECT_NE(e.find(std::string(size) + "=4"), std::string::npos) << e;
    EXPECT_NE(e.find("names 3 machines"), std::string::npos) << e;
  }
  // The first launcher present wins (mpirun sets PMI_RANK too, in some builds).
  EXPECT_EQ(FindSelf(l, local, {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "3"}, {"PMI_RANK", "1"},
                                {"PMI_SIZE", "3"}}).rank,
            0);
}

TEST(PeersFindSelf, LauncherDecidesWhenNoEntryIsLocal) {
  const PeerList l = ParsePeers("udp://10.9.0.1:9000,10.9.0.2:9000");
  const SelfRank s = FindSelf(l, LocalAddresses{{"127.0.0.1"}, {}}, {{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}});
  EXPECT_EQ(s.rank, 1);
  EXPECT_EQ(s.how, "SLURM_PROCID");
  const PeerList verbs = ParsePeers("verbs://10.9.0.1:9000,10.9.0.2:9000");
  EXPECT_EQ(FindSelf(verbs, {}, {{"RANK", "0"}, {"WORLD_SIZE", "2"}}).rank, 0);
  EXPECT_EQ(FindSelf(verbs, LocalAddresses{{"10.9.0.2"}, {}}, {}).rank, 1) << "verbs entries match like udp";
  const std::string e = ErrorOf([&] { FindSelf(verbs, {}, {}); });
  EXPECT_NE(e.find("none of the 2 --peers entries is an address of this machine"), std::string::npos) << e;
}

TEST(PeersFindSelf, LauncherMistakesAreErrors) {
  const PeerList l = ParsePeers("udp://127.0.0.1:9000,127.0.0.1:9001,10.9.0.3:9000");
  const LocalAddresses local{{"127.0.0.1"}, {}};
  std::string e = ErrorOf([&] { FindSelf(l, local, {{"RANK", "2"}, {"WORLD_SIZE", "3"}}); });
  EXPECT_NE(e.find("RANK=2 picks '10.9.0.3:9000', which is not this machine"), std::string::npos) << e;
  e = ErrorOf([&] { FindSelf(l, local, {{"RANK", "3"}, {"WORLD_SIZE", "3"}}); });
  EXPECT_NE(e.find("RANK=3 is out of range"), std::string::npos) << e;
  e = ErrorOf([&] { FindSelf(l, local, {{"RANK", "one"}, {"WORLD_SIZE", "3"}}); });
  EXPECT_NE(e.find("RANK='one' is not a number"), std::string::npos) << e;
  e = ErrorOf([&] { FindSelf(l, local, {{"RANK", "1"}}); });
  EXPECT_NE(e.find("WORLD_SIZE is not set"), std::string::npos) << e;
  // The size is checked even where the addresses decide: a launcher that started 2 processes
  // for a list of 3 has one machine missing.
  e = ErrorOf([&] { FindSelf(l, {{"10.9.0.3"}, {}}, {{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}}); });
  EXPECT_NE(e.find("PMI_SIZE=2"), std::string::npos) << e;
}

TEST(PeersFindSelf, NoneOrSeveralLocalWithoutLauncherAreErrors) {
  const PeerList l = ParsePeers("udp://10.9.0.1:9000,10.9.0.2:9000");
  std::string e = ErrorOf([&] { FindSelf(l, {{"127.0.0.1", "192.168.1.5"}, {}}, {}); });
  EXPECT_NE(e.find("none of the 2 --peers entries is an address of this machine (local: 127.0.0.1, 192.168.1.5)"),
            std::string::npos)
      << e;
  const PeerList raw = ParsePeers("raw://0025908a56d8");
  e = ErrorOf([&] { FindSelf(raw, {{}, {{"eth0", ParseMac("aabbccddeeff")}}}, {}); });
  EXPECT_NE(e.find("(local: eth0 aa:bb:cc:dd:ee:ff)"), std::string::npos) << e;
  const PeerList two = ParsePeers("udp://127.0.0.1:9000,127.0.0.1:9001");
  e = ErrorOf([&] { FindSelf(two, {{"127.0.0.1"}, {}}, {}); });
  EXPECT_NE(e.find("'udp://127.0.0.1:9000' and '127.0.0.1:9001' are both local"), std::string::npos) << e;
  EXPECT_NE(e.find("run under mpirun/srun/torchrun or give --rank"), std::string::npos) << e;
}

TEST(PeersFindSelf, LauncherEnvReadsTheProcessEnvironment) {
  const char* saved = std::getenv("PMI_SIZE");
  const std::string was = saved ? saved : "";
  ASSERT_EQ(setenv("PMI_SIZE", "7", 1), 0);
  const Env env = LauncherEnv();
  saved ? setenv("PMI_SIZE", was.c_str(), 1) : unsetenv("PMI_SIZE");
  ASSERT_EQ(env.count("PMI_SIZE"), 1u);
  EXPECT_EQ(env.at("PMI_SIZE"), "7");
  EXPECT_EQ(env.count("PATH"), 0u) << "only the launchers' variables";
}

TEST(PeersLocal, ReadLocalAddressesHasLoopback) {
  const LocalAddresses local = ReadLocalAddresses();
  EXPECT_NE(std::find(local.ipv4.begin(), local.ipv4.end(), "127.0.0.1"), local.ipv4.end());
  for (const auto& [name, mac] : local.macs) EXPECT_NE(mac, Mac{}) << name << ": zero MACs (lo) are left out";
}

// ---------------------------------------------------------------- opening the endpoint

TEST(PeersOpen, TwoUdpRanksOnLoopbackTalkBothWays) {
  const std::vector<uint16_t> ports = FreeUdpPorts(2);
  const PeerList l = ParsePeers("udp://127.0.0.1:" + std::to_string(ports[0]) + ",127.0.0.1:" +
                                std::to_string(ports[1]));
  const LocalAddresses local = ReadLocalAddresses();
  PeerOpenOptions opt;
  opt.job = 0x5eed;
  std::unique_ptr<Transport> t[2];
  for (int r = 0; r < 2; ++r) {  // both entries are local: the launcher says which is which
    const SelfRank s = FindSelf(l, local, {{"RANK", std::to_string(r)}, {"WORLD_SIZE", "2"}});
    ASSERT_EQ(s.rank, r);
    t[r] = OpenPeers(l, s, opt);
    EXPECT_EQ(t[r]->self(), r);
    EXPECT_EQ(t[r]->caps().max_payload, 32768u) << "the udp default on loopback (MTU 64 KiB): 32 KiB";
  }
  EXPECT_TRUE(Delivers(t[0].get(), Dest::Peer(1), t[1].get(), 1));
  EXPECT_TRUE(Delivers(t[1].get(), Dest::Peer(0), t[0].get(), 2));
  // Rank 1 goes silent: the endpoint leaves liveness to the job layer (the udp default would
  // call it down after 10 heartbeats, 500 ms).
  t[1].reset();
  const auto until = Clock::now() + std::chrono::milliseconds(800);
  Packet m[8];
  while (Clock::now() < until) {
    t[0]->Flush();
    t[0]->Release(t[0]->Poll(m, 8));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(t[0]->status().ok()) << t[0]->status().what;
}

TEST(PeersOpen, UdpMulticastGroupZeroReachesTheOtherRank) {
  const std::vector<uint16_t> ports = FreeUdpPorts(3);
  const PeerList l = ParsePeers("udp://127.0.0.1:" + std::to_string(ports[0]) + ",127.0.0.1:" +
                                std::to_string(ports[1]));
  const uint32_t seed = TestSeed();
  PeerOpenOptions opt;
  opt.multicast = "239.77." + std::to_string(seed % 250 + 1) + "." + std::to_string(seed / 250 % 250 + 1) + ":" +
                  std::to_string(ports[2]);
  std::unique_ptr<Transport> t[2];
  for (int r = 0; r < 2; ++r) {
    try {
      t[r] = OpenPeers(l, SelfRank{r, "test", ""}, opt);
    } catch (const Error& e) {
      if (std::string(e.what()).find("could not join") == std::string::npos) throw;
      GTEST_SKIP() << "the kernel refused multicast on lo: " << e.what();
    }
  }
  EXPECT_TRUE(t[0]->caps().multicast);
  EXPECT_TRUE(Delivers(t[0].get(), Dest::Group(0), t[1].get(), 3));
  EXPECT_TRUE(Delivers(t[1].get(), Dest::Group(0), t[0].get(), 4));
}

TEST(PeersOpen, BadSettingsAreErrors) {
  // Rank 0's port is held here: the settings must be refused before any socket is bound.
  const int held = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof at;
  ASSERT_EQ(bind(held, reinterpret_cast<sockaddr*>(&at), sizeof at), 0);
  ASSERT_EQ(getsockname(held, reinterpret_cast<sockaddr*>(&at), &len), 0);
  const PeerList l = ParsePeers("udp://127.0.0.1:" + std::to_string(ntohs(at.sin_port)) + ",127.0.0.1:9001");
  for (const char* bad : {"239.1.2.3", "224.0.0.1:9000", "239.1.2.3:0", "group:9000"}) {
    PeerOpenOptions opt;
    opt.multicast = bad;
    const std::string e = ErrorOf([&] { OpenPeers(l, SelfRank{0, "test", ""}, opt); });
    EXPECT_NE(e.find(std::string("--multicast=") + bad), std::string::npos) << e;
  }
  const std::string in_use = ErrorOf([&] { OpenPeers(l, SelfRank{0, "test", ""}, {}); });
  EXPECT_NE(in_use.find("cannot bind 127.0.0.1:"), std::string::npos) << in_use;
  close(held);
  const PeerList raw = ParsePeers("raw://0025908a56d8,0025908a56d9");
  PeerOpenOptions opt;
  opt.iface = "hs-no-such-if";
  opt.multicast = "yes";
  std::string e = ErrorOf([&] { OpenPeers(raw, SelfRank{1, "--rank", ""}, opt); });
  EXPECT_NE(e.find("'yes' is not a MAC"), std::string::npos) << "checked before the socket: " << e;
  e = ErrorOf([&] { OpenPeers(raw, SelfRank{1, "--rank", ""}, {}); });
  EXPECT_NE(e.find("00:25:90:8a:56:d9 (rank 1) is on no interface here"), std::string::npos) << e;
}

// The programs' endpoint (bin/program.cpp: NetJobFromFlags -> OpenPeers) is the transport
// factory's: one endpoint opened there per call, and the factory's own mistakes come back.
TEST(PeersOpen, GoesThroughTheTransportFactory) {
  const std::vector<uint16_t> ports = FreeUdpPorts(2);
  const PeerList l = ParsePeers("udp://127.0.0.1:" + std::to_string(ports[0]) + ",127.0.0.1:" +
                                std::to_string(ports[1]));
  const uint64_t before = TransportsOpened();
  const std::unique_ptr<Transport> t = OpenPeers(l, SelfRank{1, "--rank", ""}, {});
  EXPECT_EQ(TransportsOpened(), before + 1);
  PeerOpenOptions opt;
  opt.max_payload = 100;  // not a multiple of 16: the backend refuses it, through the factory
  const std::string e = ErrorOf([&] { OpenPeers(l, SelfRank{0, "--rank", ""}, opt); });
  EXPECT_NE(e.find("max_payload"), std::string::npos) << e;
  EXPECT_EQ(TransportsOpened(), before + 1) << "a refused endpoint is not counted";
}

// Two namespaces on a veth pair: each end reads its own namespace's addresses, finds itself in
// the list with no help, and opens its endpoint there; raw Ethernet (unicast and the group
// derived from the job) and UDP.
TEST(PeersOpen, EachEndOfAVethPairFindsItselfAndTalks) {
  if (const std::string why = test::TestNet::Unavailable(); !why.empty()) GTEST_SKIP() << why;
  test::VethPair net;
  LocalAddresses local[2];
  std::string macs;
  for (int i = 0; i < 2; ++i) {
    local[i] = ReadLocalAddresses(net.ns(i));
    for (const auto& [name, mac] : local[i].macs)
      if (name == net.iface(i)) macs += (i ? "," : "raw://") + FormatMac(mac);
  }
  const PeerList raw = ParsePeers(macs);
  ASSERT_EQ(raw.peers.size(), 2u) << macs;
  const PeerList udp = ParsePeers("udp://" + net.address(0) + ":9000," + net.address(1) + ":9000");
  for (const PeerList* l : {&raw, &udp}) {
    SCOPED_TRACE(PeerName(*l, 0));
    std::unique_ptr<Transport> t[2];
    for (int i = 0; i < 2; ++i) {
      const SelfRank s = FindSelf(*l, local[i], {});
      ASSERT_EQ(s.rank, i);
      EXPECT_EQ(s.iface, l == &raw ? net.iface(i) : "");
      PeerOpenOptions opt;
      opt.job = 0xabc;
      opt.netns = net.ns(i);
      if (l == &raw) opt.multicast = "on";
      t[i] = OpenPeers(*l, s, opt);
      // What one frame or datagram carries within MTU 1500, unfragmented: raw 1500 - 32 bytes
      // of our header - 8 of checksum, down to 16; udp 1500 - 28 (IPv4, UDP) - 32 - 16.
      EXPECT_EQ(t[i]->caps().max_payload, l == &raw ? 1456u : 1424u) << (l == &raw ? "raw" : "udp");
    }
    EXPECT_TRUE(Delivers(t[0].get(), Dest::Peer(1), t[1].get(), 5));
    EXPECT_TRUE(Delivers(t[1].get(), Dest::Peer(0), t[0].get(), 6));
    if (l == &raw) {
      EXPECT_TRUE(Delivers(t[0].get(), Dest::Group(0), t[1].get(), 7));
    }
  }
  // Rank 1 opened on rank 0's interface: peers would not know its frames.
  PeerOpenOptions opt;
  opt.iface = net.iface(0);
  opt.netns = net.ns(0);
  const std::string e = ErrorOf([&] { OpenPeers(raw, SelfRank{1, "--rank", ""}, opt); });
  EXPECT_NE(e.find("interface '" + net.iface(0) + "' has MAC"), std::string::npos) << e;
}

#ifdef HOGSTREAM_VERBS
// Three machines of a verbs job, each on its own queue pair of one (fake) RDMA device: each
// opens its endpoint from the list alone, the queue pair numbers are traded over UDP, and then
// every machine reaches every other over verbs. Mistakes are one line.
TEST(PeersOpen, VerbsMachinesTradeAddressesThenTalk) {
  FakeVerbs fabric;
  const std::vector<uint16_t> ports = FreeUdpPorts(3);
  std::string spec = "verbs://";
  for (int r = 0; r < 3; ++r) spec += (r ? ",127.0.0.1:" : "127.0.0.1:") + std::to_string(ports[r]);
  const PeerList l = ParsePeers(spec);
  PeerOpenOptions opt;
  opt.job = 0x7e;
  opt.verbs_api = fabric.api();
  opt.exchange_timeout = std::chrono::seconds(10);
  std::unique_ptr<Transport> t[3];
  std::string errors[3];
  std::vector<std::thread> machines;
  for (int r = 0; r < 3; ++r)
    machines.emplace_back([&, r] {
      try {
        t[r] = OpenPeers(l, SelfRank{r, "--rank", ""}, opt);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& m : machines) m.join();
  for (int r = 0; r < 3; ++r) ASSERT_EQ(errors[r], "") << "rank " << r;
  for (int r = 0; r < 3; ++r)
    for (int q = 0; q < 3; ++q) {
      if (q == r) continue;
      EXPECT_TRUE(Delivers(t[r].get(), Dest::Peer(q), t[q].get(), 10 * r + q)) << r << " to " << q;
    }
  // Every one of the 6 messages over verbs (a job opens no heartbeats: the fabric carries only them).
  EXPECT_GE(fabric.stats().delivered, 6u) << "the messages went over verbs";

  PeerOpenOptions bad = opt;
  bad.multicast = "on";
  std::string e = ErrorOf([&] { OpenPeers(l, SelfRank{0, "--rank", ""}, bad); });
  EXPECT_NE(e.find("verbs: --multicast needs the subnet manager"), std::string::npos) << e;
  bad = opt;
  bad.exchange_timeout = std::chrono::milliseconds(200);  // nobody else comes
  e = ErrorOf([&] { OpenPeers(l, SelfRank{2, "--rank", ""}, bad); });
  EXPECT_NE(e.find("no answer within 0.2 s from 'verbs://127.0.0.1:" + std::to_string(ports[0]) + "', '127.0.0.1:"),
            std::string::npos)
      << e;
  bad = opt;
  bad.iface = "fake9";
  e = ErrorOf([&] { OpenPeers(l, SelfRank{0, "--rank", ""}, bad); });
  EXPECT_NE(e.find("fake9"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}
#endif

// A full frame of the default payload fits one IP packet, keyed or not (a keyed frame's
// trailer is 32 bytes: it used to be counted as 16, and every full keyed frame was fragmented).
TEST(PeersOpen, TheDefaultUdpPayloadNeverFragmentsAFrame) {
  for (uint32_t mtu : {576u, 1280u, 1500u, 4000u, 9000u}) {
    for (const bool keyed : {false, true}) {
      const uint32_t payload = UdpPayloadFor(mtu, keyed);
      const FrameFormat fmt(1, keyed ? std::optional<JobKey>(JobKey{}) : std::nullopt);
      const size_t frame = fmt.overhead() + payload;
      const size_t sent = (frame + 15) / 16 * 16;  // senders pad to 16
      EXPECT_LE(28 + sent, mtu) << mtu << (keyed ? " keyed" : "");
      EXPECT_GT(28 + sent + 32, mtu) << mtu << (keyed ? " keyed" : "") << ": room left for another 32 bytes";
      EXPECT_EQ(payload % 16, 0u);
    }
  }
  EXPECT_EQ(UdpPayloadFor(0, true), 8192u);
  EXPECT_EQ(UdpPayloadFor(65536, false), 32768u);
}

}  // namespace
}  // namespace hogstream
