// `hogstream bench`'s measurement: over each loopback transport, both the segment and the raw
// blast move data, the ratio is theirs, and bad settings are one-line errors. Every link comes
// from the transport factory and --peers is read by the one --peers parser; the default chunk
// sizes follow what one message of the link carries (raw at MTU 9000: no 32 KiB chunk).
#include "bench/link_bench.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <algorithm>

#include "base/common.hpp"
#include "bin/peers.hpp"
#include "sync/wire.hpp"
#include "test/error_of.hpp"
#include "test/program_runner.hpp"
#include "transport/open.hpp"
#include "test/transport/veth.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

class LinkBench : public ::testing::TestWithParam<const char*> {};

TEST_P(LinkBench, MeasuresSegmentAndRawLink) {
  LinkBenchOptions o;
  o.transport = GetParam();
  o.chunk_bytes = {4096, 16384};
  o.seconds = 0.2;
  o.buffer_bytes = size_t{1} << 20;
  const std::vector<LinkBenchRow> rows = RunLinkBench(o);
  ASSERT_EQ(rows.size(), 2u);
  for (const LinkBenchRow& r : rows) {
    SCOPED_TRACE(::testing::Message() << r.transport << " " << r.chunk_bytes);
    EXPECT_GT(r.segment_gbps, 0);
    EXPECT_GT(r.raw_gbps, 0);
    EXPECT_GE(r.segment_both_gbps, r.segment_gbps);
    EXPECT_GT(r.segment_sweeps_per_s, 0) << "the segment went round the whole buffer";
    EXPECT_NEAR(r.ratio, r.segment_gbps / r.raw_gbps, 1e-9);
    EXPECT_GT(r.raw_frames_per_s, 0);
    EXPECT_GT(r.cpu_master + r.cpu_slave, 0);
  }
  std::ostringstream table, json;
  PrintLinkBench(rows, table, false);
  PrintLinkBench(rows, json, true);
  EXPECT_NE(table.str().find("ratio"), std::string::npos);
  // --json: one object per row, read back by an independent reader, the figures the rows'.
  std::istringstream lines(json.str());
  size_t i = 0;
  for (std::string line; std::getline(lines, line); ++i) {
    ASSERT_LT(i, rows.size()) << line;
    const nlohmann::json j = nlohmann::json::parse(line);
    EXPECT_EQ(j["chunk_bytes"], rows[i].chunk_bytes);
    EXPECT_EQ(j["transport"], GetParam());
    EXPECT_NEAR(j["ratio"].get<double>(), rows[i].ratio, 1e-5 * rows[i].ratio);
    EXPECT_NEAR(j["raw_gbps"].get<double>(), rows[i].raw_gbps, 1e-5 * rows[i].raw_gbps);
    EXPECT_EQ(j.size(), 20u);
  }
  EXPECT_EQ(i, rows.size());
  LinkBenchRow broken = rows[0];
  broken.ratio = std::nan("");  // a figure that is no number is null, and the line still JSON
  std::ostringstream one;
  PrintLinkBench({broken}, one, true);
  EXPECT_TRUE(nlohmann::json::parse(one.str())["ratio"].is_null()) << one.str();
}

INSTANTIATE_TEST_SUITE_P(Loopback, LinkBench, ::testing::Values("inproc", "udp"));

// Across two network namespaces on a veth pair (root only): raw Ethernet, UDP unicast and UDP
// multicast, each with the segment and the raw blast measured, the segment kept in sync.
TEST(LinkBenchOverVeth, RawAndUdpBetweenTwoNamespaces) {
  if (const std::string why = test::TestNet::Unavailable(); !why.empty()) GTEST_SKIP() << why;
  test::VethPair net(1500);
  struct Case {
    const char* transport;
    const char* multicast;
  };
  for (const Case& c : {Case{"raw", ""}, Case{"raw", "03:00:5e:48:53:01"}, Case{"udp", ""},
                        Case{"udp", "239.77.0.9"}}) {
    SCOPED_TRACE(::testing::Message() << c.transport << " " << c.multicast);
    LinkBenchOptions o;
    o.transport = c.transport;
    o.chunk_bytes = {1024};
    o.batches = {16};
    o.seconds = 0.2;
    o.buffer_bytes = size_t{1} << 20;
    o.netns = {net.ns(0), net.ns(1)};
    o.multicast = c.multicast;
    if (o.transport == "raw") {
      o.where = {net.iface(0), net.iface(1)};
    } else {
      o.where = {net.address(0), net.address(1)};
    }
    const std::vector<LinkBenchRow> rows = RunLinkBench(o);
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_GT(rows[0].segment_gbps, 0);
    EXPECT_GT(rows[0].raw_gbps, 0);
    EXPECT_GT(rows[0].raw_one_way_gbps, 0);
    EXPECT_GT(rows[0].segment_sweeps_per_s, 0) << "the segment went round the whole buffer";
    EXPECT_EQ(rows[0].multicast, *c.multicast != 0);
  }
}

std::string IpProgram() {
  for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"})
    if (access(p, X_OK) == 0) return p;
  return "";
}

// `hogstream bench --peers`: the two ends in two processes, one per namespace (two "hosts"),
// the same command line on both; end 0 prints the table, end 1 a line. Then end 0 alone: the
// silent peer is a one-line error naming it, at the --timeout deadline.
TEST(LinkBenchPeers, TwoProcessesInTwoNamespaces) {
  if (const std::string why = test::TestNet::Unavailable(); !why.empty()) GTEST_SKIP() << why;
  test::VethPair net(1500);
  const std::string ip = IpProgram();
  ASSERT_FALSE(ip.empty());
  test::ScratchDir dir("bench_peers");
  const std::string peers = "--peers=udp://" + net.address(0) + ":7311," + net.address(1) + ":7311";
  auto cmd = [&](int end) {
    return std::vector<std::string>{"netns", "exec", net.ns(end), HS_HOGSTREAM_BIN, "bench", "--transport=udp",
                                    peers, "--chunk=1024", "--batch=16", "--seconds=0.2", "--timeout=20"};
  };
  test::Child one(ip, cmd(1), dir, "end1");
  const test::Finished zero = test::Child(ip, cmd(0), dir, "end0").Wait(60);
  const test::Finished served = one.Wait(30);
  ASSERT_EQ(zero.rc, 0) << zero.err;
  EXPECT_NE(zero.out.find("ratio"), std::string::npos) << zero.out;
  EXPECT_NE(zero.out.find("udp "), std::string::npos) << zero.out;
  EXPECT_EQ(served.rc, 0) << served.err;
  EXPECT_NE(served.out.find("served every run"), std::string::npos) << served.out;

  std::vector<std::string> alone = cmd(0);
  alone.back() = "--timeout=1";
  const test::Finished silent = test::RunProgram(ip, alone, dir, 30);
  EXPECT_EQ(silent.rc, 1);
  EXPECT_NE(silent.last_line().find(net.address(1) + ":7311"), std::string::npos) << silent.err;
  EXPECT_EQ(std::count(silent.err.begin(), silent.err.end(), '\n'), 1) << silent.err;
}

TEST(LinkBenchSettings, BadSettingsAreErrors) {
  LinkBenchOptions o;
  o.seconds = 0.05;
  o.transport = "carrier-pigeon";
  EXPECT_THROW(RunLinkBench(o), Error);
  o.transport = "udp";
  o.chunk_bytes = {10};
  EXPECT_THROW(RunLinkBench(o), Error);
  o.chunk_bytes = {1 << 20};  // bigger than a datagram
  EXPECT_THROW(RunLinkBench(o), Error);
  o.chunk_bytes = {4096};
  o.seconds = 0;
  EXPECT_THROW(RunLinkBench(o), Error);
}

TEST(LinkBenchChunks, DefaultsAreWhatOneMessageCarries) {
  using Sizes = std::vector<uint32_t>;
  EXPECT_EQ(BenchChunks(), (Sizes{4096, 16384, 32768}));
  EXPECT_EQ(BenchChunks(32768), (Sizes{4096, 16384, 32768}));
  EXPECT_EQ(BenchChunks(20000), (Sizes{4096, 16384, 20000}));
  EXPECT_EQ(BenchChunks(8928), (Sizes{4096, 8928})) << "raw at MTU 9000";
  EXPECT_EQ(BenchChunks(1440), (Sizes{1440})) << "raw at MTU 1500";
  EXPECT_EQ(BenchChunks(1450), (Sizes{1440})) << "down to a multiple of 16";
}

// Every link the bench measures is opened by the transport factory: one to fit the chunk sizes,
// then one per run (raw both ways, raw one way, segment), two ends each.
TEST(LinkBenchSettings, EveryLinkComesFromTheFactory) {
  LinkBenchOptions o;
  o.transport = "inproc";
  o.chunk_bytes = {4096};
  o.seconds = 0.05;
  o.buffer_bytes = size_t{1} << 20;
  const uint64_t before = TransportsOpened();
  ASSERT_EQ(RunLinkBench(o).size(), 1u);
  EXPECT_EQ(TransportsOpened() - before, 8u);
}

// Without --chunk, udp on 127.0.0.1 (whose datagrams carry 32 KiB unfragmented) runs the three
// default sizes.
TEST(LinkBenchSettings, UdpLoopbackRunsTheDefaultSizes) {
  LinkBenchOptions o;
  o.seconds = 0.05;
  o.buffer_bytes = size_t{1} << 20;
  std::vector<uint32_t> sizes;
  for (const LinkBenchRow& r : RunLinkBench(o)) sizes.push_back(r.chunk_bytes);
  // udp's message on loopback is 32 KiB; a chunk takes it less sync's header.
  EXPECT_EQ(sizes, BenchChunks(32768 - kWireHeaderBytes));
  EXPECT_EQ(sizes.back(), 32736u);
}

// bench --peers is read by the one --peers parser (bin/peers.hpp): host names resolve, files
// read, and its mistakes are the parser's one-line errors.
TEST(LinkBenchSettings, PeersAreReadByThePeersParser) {
  struct Case {
    std::string peers, names;
  };
  const Case cases[] = {
      {"udp://127.0.0.1:9000,localhost:9000", "'udp://127.0.0.1:9000' and 'localhost:9000' are the same machine"},
      {"udp://no-such-host.invalid:1,127.0.0.1:2", "--peers: cannot resolve 'no-such-host.invalid'"},
      {"@/nonexistent/bench-peers", "--peers=@/nonexistent/bench-peers: cannot read"},
      {"udp://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", "exactly two entries"},
      {"raw://0025908a56d8,0025908a56d9", "--peers=raw://... does not match --transport=udp"},
      {"udp://10.255.0.1:1,10.255.0.2:2", "neither 10.255.0.1:1 nor 10.255.0.2:2 is an address of this host"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.peers);
    LinkBenchOptions o;
    o.seconds = 0.05;
    o.peers = c.peers;
    const std::string e = ErrorOf([&] { RunLinkBench(o); });
    EXPECT_NE(e.find(c.names), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
}

// Raw Ethernet at MTU 9000 between two namespaces, no --chunk: the sizes that fit one frame
// (8944 bytes of payload: sync's 32-byte header and a chunk of 8912), where 32 KiB used to be
// refused. A size given that does not fit is one line naming it and the largest chunk that does.
TEST(LinkBenchOverVeth, RawDefaultChunksFitAnMtuOf9000) {
  if (const std::string why = test::TestNet::Unavailable(); !why.empty()) GTEST_SKIP() << why;
  test::VethPair net(9000);
  LinkBenchOptions o;
  o.transport = "raw";
  o.seconds = 0.1;
  o.buffer_bytes = size_t{1} << 20;
  o.netns = {net.ns(0), net.ns(1)};
  o.where = {net.iface(0), net.iface(1)};
  const std::vector<LinkBenchRow> rows = RunLinkBench(o);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].chunk_bytes, 4096u);
  EXPECT_EQ(rows[1].chunk_bytes, 8912u);
  for (const LinkBenchRow& r : rows) {
    EXPECT_GT(r.segment_gbps, 0) << r.chunk_bytes;
    EXPECT_GT(r.raw_gbps, 0) << r.chunk_bytes;
  }
  o.chunk_bytes = {4096, 32768};
  const std::string e = ErrorOf([&] { RunLinkBench(o); });
  EXPECT_NE(e.find("--chunk=32768 does not fit one raw message here"), std::string::npos) << e;
  EXPECT_NE(e.find("a chunk takes at most 8912 bytes"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

// The command line of the issue: `hogstream bench --transport=raw --peers=raw://MAC,MAC` with
// no --chunk, one process per namespace on a veth link of MTU 9000.
TEST(LinkBenchPeers, RawAtMtu9000RunsByDefault) {
  if (const std::string why = test::TestNet::Unavailable(); !why.empty()) GTEST_SKIP() << why;
  test::VethPair net(9000);
  const std::string ip = IpProgram();
  ASSERT_FALSE(ip.empty());
  std::string peers = "--peers=raw://";
  for (int i = 0; i < 2; ++i)
    for (const auto& [name, mac] : ReadLocalAddresses(net.ns(i)).macs)
      if (name == net.iface(i)) peers += (i ? "," : "") + FormatMac(mac);
  test::ScratchDir dir("bench_raw_peers");
  auto cmd = [&](int end) {
    return std::vector<std::string>{"netns", "exec", net.ns(end), HS_HOGSTREAM_BIN, "bench", "--transport=raw", peers,
                                    "--batch=16", "--seconds=0.1", "--buffer=1M", "--timeout=20"};
  };
  test::Child one(ip, cmd(1), dir, "end1");
  const test::Finished zero = test::Child(ip, cmd(0), dir, "end0").Wait(60);
  const test::Finished served = one.Wait(30);
  ASSERT_EQ(zero.rc, 0) << zero.err;
  for (const char* chunk : {"    4096", "    8912"})  // the table's transport and chunk columns
    EXPECT_NE(zero.out.find("raw" + std::string(11, ' ') + chunk), std::string::npos) << chunk << "\n" << zero.out;
  EXPECT_EQ(served.rc, 0) << served.err;
}

}  // namespace
}  // namespace hogstream
