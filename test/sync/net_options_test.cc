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

}  // namespace HS_UNITY_ID
}  // namespace hogstream
