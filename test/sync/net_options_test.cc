// The settings of a machine's part of a job across machines (sync/net_options.hpp): each
// mistake is refused with one line that names the flag to change, and the quorum's default
// follows the dead-machine timeout.
#include "sync/net_options.hpp"

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "base/common.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

// The one line CheckNetJobOptions refuses `opt` with ("" when it takes it).
std::string Refusal(const NetJobOptions& opt, bool can_multicast = true) {
  try {
    CheckNetJobOptions(opt, can_multicast);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

NetJobOptions Two() {
  NetJobOptions o;
  o.machines = 2;
  o.rank = 1;
  return o;
}

TEST(NetOptionsTest, SoundSettingsPassAndTheQuorumDefaultsToThirtyDeadTimes) {
  NetJobOptions o = Two();
  o.dead_ms = 700;
  const NetJobOptions c = CheckNetJobOptions(o, false);
  EXPECT_EQ(c.quorum_ms, 30u * 700u);
  EXPECT_EQ(c.rank, 1);
  o.quorum_ms = 900;  // given: kept
  EXPECT_EQ(CheckNetJobOptions(o, false).quorum_ms, 900u);
}

TEST(NetOptionsTest, EachMistakeIsOneLineNamingWhatToChange) {
  struct Case {
    const char* what;
    std::function<void(NetJobOptions&)> spoil;
    bool can_multicast;
    const char* says;
  };
  const Case cases[] = {
      {"no machines", [](NetJobOptions& o) { o.machines = 0; }, true, "a job of 0 machines"},
      {"rank beyond", [](NetJobOptions& o) { o.rank = 2; }, true, "machine rank 2 outside a job of 2"},
      {"negative rank", [](NetJobOptions& o) { o.rank = -1; }, true, "outside a job of 2"},
      {"multicast", [](NetJobOptions& o) { o.multicast = true; }, false, "leave out --multicast"},
      {"dead within two heartbeats", [](NetJobOptions& o) { o.dead_ms = 2 * o.heartbeat_ms; }, true,
       "must exceed two heartbeats"},
      {"no heartbeat", [](NetJobOptions& o) { o.heartbeat_ms = 0; }, true, "must exceed two heartbeats"},
      {"quorum not above dead", [](NetJobOptions& o) { o.quorum_ms = o.dead_ms; }, true,
       "make --quorum_ms longer than --dead_ms"},
  };
  for (const Case& c : cases) {
    NetJobOptions o = Two();
    c.spoil(o);
    const std::string line = Refusal(o, c.can_multicast);
    EXPECT_NE(line.find(c.says), std::string::npos) << c.what << ": \"" << line << "\"";
    EXPECT_EQ(line.find('\n'), std::string::npos) << c.what << ": more than one line";
  }
  // Multicast where the transport can: taken.
  NetJobOptions o = Two();
  o.multicast = true;
  EXPECT_EQ(Refusal(o, true), "");
}

// Two machines agree on the buffer only where its length and parameter offsets match; chunks are
// the most a message carries (a multiple of 4 floats) unless asked, more is one line, and the
// parameter boundaries cut them where asked.
TEST(NetOptionsTest, TheBuffersDigestAndTheJobsChunks) {
  EXPECT_EQ(BufferDigest(1000, {0, 600}), BufferDigest(1000, {0, 600}));
  EXPECT_NE(BufferDigest(1000, {0, 600}), BufferDigest(1001, {0, 600}));
  EXPECT_NE(BufferDigest(1000, {0, 600}), BufferDigest(1000, {0, 601}));
  EXPECT_NE(BufferDigest(1000, {}), BufferDigest(1000, {0}));
  NetJobOptions o = Two();
  const ChunkLayout most = JobChunks(o, 1000, {0, 600}, false, 1030);  // 257.5 floats: 256
  EXPECT_EQ(most.chunk_floats, 256u);
  EXPECT_EQ(most.count, 4u);
  const ChunkLayout cut = JobChunks(o, 1000, {0, 600}, true, 1030);
  EXPECT_EQ(cut.count, 5u) << "600 = 256 + 256 + 88, then 400 = 256 + 144";
  EXPECT_EQ(cut.offset(3), 600u);
  o.chunk_floats = 100;
  EXPECT_EQ(JobChunks(o, 1000, {}, false, 1030).count, 10u);
  o.chunk_floats = 260;
  try {
    JobChunks(o, 1000, {}, false, 1030);
    ADD_FAILURE() << "260 floats taken where a message carries 256";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("chunks of 260 floats do not fit this transport's messages (256 floats at most)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace HS_UNITY_ID
}  // namespace hogstream
