// `hogstream bench`'s measurement: over each loopback transport, both the segment and the raw
// blast move data, the ratio is theirs, and bad settings are one-line errors.
#include "bin/link_bench.hpp"

#include <gtest/gtest.h>

#include <sstream>

#include "core/common.hpp"
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
