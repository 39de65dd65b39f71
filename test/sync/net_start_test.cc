// How a machine of a job begins (sync/net_start.hpp), on a stepped clock: a new job starts once
// every machine is heard and ready; a machine that finds the job running joins once it hears a
// strict majority; a silent machine, a disagreement and --svb joining end the start with one
// line each.
#include "sync/net_start.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "sync/net_figures.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
constexpr uint32_t kStartMs = 1000, kHeartbeatMs = 20;

ControlState Told(uint32_t flags, int64_t view = 0) {
  ControlState s;
  s.flags = flags;
  s.view = view;
  return s;
}

TEST(NetStartTest, ANewJobStartsOnceEveryMachineIsHeardAndReady) {
  NetStart start(kStartMs, kHeartbeatMs);
  NetMembers m(0, 3);
  const Clock::time_point t0 = Clock::now();
  EXPECT_EQ(start.Decide(t0, t0, m, false), NetStart::Go::kWait);
  m.Hear(1, t0, Told(0), false);
  EXPECT_EQ(start.Decide(t0, t0, m, false), NetStart::Go::kWait);
  EXPECT_FALSE(m.ready()) << "machine 2 not heard yet";
  m.Hear(2, t0, Told(0), false);
  EXPECT_EQ(start.Decide(t0, t0, m, false), NetStart::Go::kWait) << "heard, but the others are not ready";
  EXPECT_TRUE(m.ready()) << "this one has heard everyone: ready";
  m.Hear(1, t0, Told(kNetReady), false);
  EXPECT_EQ(start.Decide(t0, t0, m, false), NetStart::Go::kWait);
  m.Hear(2, t0, Told(kNetReady), false);
  EXPECT_EQ(start.Decide(t0, t0, m, false), NetStart::Go::kTrain);
  // One of the first (ready: it heard everyone before the job ran) starts with them when it
  // hears the others already training, though not all of them said they are ready.
  NetStart first(kStartMs, kHeartbeatMs);
  NetMembers one(2, 3);
  one.Hear(0, t0, Told(0), false);
  one.Hear(1, t0, Told(0), false);
  EXPECT_EQ(first.Decide(t0, t0, one, false), NetStart::Go::kWait);
  ASSERT_TRUE(one.ready());
  one.Hear(0, t0, Told(kNetReady | kNetTraining), false);
  EXPECT_EQ(first.Decide(t0, t0, one, false), NetStart::Go::kTrain) << "not a newcomer: it trains";
}

TEST(NetStartTest, ANewcomerJoinsARunningJobOnlyOnceItHearsAStrictMajority) {
  NetStart start(kStartMs, kHeartbeatMs);
  NetMembers m(3, 4);
  const Clock::time_point t0 = Clock::now();
  m.Hear(0, t0, Told(kNetReady | kNetTraining, 500), false);
  EXPECT_EQ(start.Decide(t0, t0, m, false), NetStart::Go::kWait) << "2 of 4 is not a strict majority";
  m.Hear(1, t0, Told(kNetReady | kNetTraining, 700), false);
  EXPECT_EQ(start.Decide(t0, t0, m, false), NetStart::Go::kJoinRunning);
  EXPECT_FALSE(m.ready()) << "it has no weights yet";
  EXPECT_EQ(m.MedianView(), 500) << "the lower of two views";
  NetStart svb(kStartMs, kHeartbeatMs);
  EXPECT_EQ(svb.Decide(t0, t0, m, /*svb=*/true), NetStart::Go::kFailed);
  EXPECT_TRUE(svb.failed());
  EXPECT_NE(svb.error().find("--svb: this machine cannot join a running job"), std::string::npos) << svb.error();
}

TEST(NetStartTest, ASilentMachineEndsTheStartAfterStartMsWithItsName) {
  NetStart start(kStartMs, kHeartbeatMs);
  NetMembers m(0, 3);
  const Clock::time_point t0 = Clock::now();
  m.Hear(1, t0, Told(kNetReady), false);
  EXPECT_EQ(start.Decide(t0 + milliseconds(kStartMs), t0, m, false), NetStart::Go::kWait);
  EXPECT_EQ(start.Decide(t0 + milliseconds(kStartMs + 1), t0, m, false), NetStart::Go::kSilent);
  const std::vector<std::string> names{"udp://10.0.0.1:7000", "udp://10.0.0.2:7000", "udp://10.0.0.3:7000"};
  FrameLosses none;
  EXPECT_EQ(NoWordLine(m, names, kStartMs, none, 0),
            "no word from machine 2 (udp://10.0.0.3:7000) after 1 s (is it started, with the same --peers list and job?)");
  FrameLosses mac;
  mac.mac = 12;
  EXPECT_NE(NoWordLine(m, names, kStartMs, mac, 0).find("12 frames failed the MAC: does every machine have the same --job-key?"),
            std::string::npos);
  EXPECT_NE(NoWordLine(m, {}, kStartMs, none, 3).find("never echo this run"), std::string::npos);
  FrameLosses foreign;
  foreign.foreign = 4;
  EXPECT_NE(NoWordLine(m, {}, kStartMs, foreign, 0).find("4 frames came from another job"), std::string::npos);
}

TEST(NetStartTest, ADisagreementEndsTheStartFiveHeartbeatsOnWithTheFirstReason) {
  NetStart start(kStartMs, kHeartbeatMs);
  NetMembers m(0, 2);
  const Clock::time_point t0 = Clock::now();
  start.Disagreed(t0, "machine 1 differs from machine 0 in its net");
  start.Disagreed(t0 + milliseconds(10), "machine 1 differs from machine 0 in its solver");
  EXPECT_EQ(start.Decide(t0 + milliseconds(5 * kHeartbeatMs), t0, m, false), NetStart::Go::kWait)
      << "the other machine hears this one for a few heartbeats, and names the difference too";
  EXPECT_EQ(start.Decide(t0 + milliseconds(5 * kHeartbeatMs + 1), t0, m, false), NetStart::Go::kFailed);
  EXPECT_TRUE(start.failed());
  EXPECT_FALSE(start.ok());
  EXPECT_EQ(start.error(), "machine 1 differs from machine 0 in its net");
}

}  // namespace
}  // namespace hogstream
