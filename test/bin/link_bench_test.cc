// `hogstream bench`'s measurement: over each loopback transport, both the segment and the raw
// blast move data, the ratio is theirs, and bad settings are one-line errors.
#include "bin/link_bench.hpp"

#include <gtest/gtest.h>

#include <sstream>

#include <unistd.h>

#include <algorithm>

#include "base/common.hpp"
#include "test/program_runner.hpp"
#include "test/transport/veth.hpp"

namespace hogstream {
namespace {

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
  EXPECT_NE(json.str().find("\"ratio\":"), std::string::npos);
  EXPECT_NE(json.str().find("\"raw_gbps\":"), std::string::npos);
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

}  // namespace
}  // namespace hogstream
