// How a machine's part of a job ends (sync/net_leave.hpp), on a stepped clock: leave on notice
// waits for its progress to go out, then for the answers to its last positions (no longer than
// a quarter of dead_ms), then posts its finals every heartbeat until every live machine holds
// them (or dead_ms pass); who holds whose finals, from what the others told.
#include "sync/net_leave.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

namespace hogstream {
namespace HS_UNITY_ID {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
constexpr uint32_t kHeartbeatMs = 20, kDeadMs = 2000, kWindow = 64;

NetLeave::Seen Seen(bool flushed, bool in_flight, bool held) {
  NetLeave::Seen s;
  s.flushed = flushed;
  s.in_flight = in_flight;
  s.held = held;
  return s;
}

// A notice is refused (one line, for the log) while the job ends and where no other machine
// holds the weights; taken otherwise.
TEST(NetLeaveTest, ANoticeIsRefusedAtTheEndAndWhereNoOtherMachineHasTheWeights) {
  ASSERT_NE(NetLeave::Refusal(true, 3), nullptr);
  EXPECT_STREQ(NetLeave::Refusal(true, 3), "its solvers are done already (the job is ending)");
  EXPECT_STREQ(NetLeave::Refusal(false, 1), "no other machine has the weights to go on with");
  EXPECT_STREQ(NetLeave::Refusal(false, 0), "no other machine has the weights to go on with");
  EXPECT_EQ(NetLeave::Refusal(false, 2), nullptr);
  NetLeave l(20, 600, 64);
  const auto t0 = std::chrono::steady_clock::now();
  l.Begin(t0, 350);
  EXPECT_EQ(l.NoticeLine("machine 1", 9), "machine 1 leaves the job on notice at iteration 350: its solvers stop, its "
                                          "progress goes out, then the last values of its 9 chunks");
  EXPECT_EQ(l.LeftLine("machine 1", t0 + std::chrono::milliseconds(1250)),
            "machine 1 has left the job 1.25 s after the notice (0 sweeps of finals; not every machine said it holds them)");
}

TEST(NetLeaveTest, ItStaysDrainingUntilItsProgressHasGoneOut) {
  NetLeave leave(kHeartbeatMs, kDeadMs, kWindow);
  const Clock::time_point t0 = Clock::now();
  EXPECT_FALSE(leave.leaving());
  EXPECT_EQ(leave.Next(t0, Seen(true, false, true)), NetLeave::Do::kWait) << "no notice, nothing to do";
  leave.Begin(t0, 1234);
  EXPECT_TRUE(leave.leaving());
  EXPECT_FALSE(leave.quiet());
  EXPECT_EQ(leave.iteration(), 1234);
  for (int i = 1; i <= 10; ++i)
    EXPECT_EQ(leave.Next(t0 + milliseconds(100 * i), Seen(false, false, true)), NetLeave::Do::kWait) << i;
  EXPECT_EQ(leave.step(), NetLeave::Step::kDraining) << "not flushed: still draining, even with everyone holding";
  EXPECT_EQ(leave.Next(t0 + milliseconds(1100), Seen(true, true, false)), NetLeave::Do::kWait);
  EXPECT_TRUE(leave.quiet()) << "flushed: no new position goes out";
}

TEST(NetLeaveTest, TheAnswersToItsLastPositionsAreAwaitedAQuarterOfDeadMsAtMost) {
  NetLeave leave(kHeartbeatMs, kDeadMs, kWindow);
  const Clock::time_point t0 = Clock::now();
  leave.Begin(t0, 0);
  leave.Next(t0, Seen(true, true, false));  // quiet at t0
  ASSERT_EQ(leave.step(), NetLeave::Step::kQuiet);
  EXPECT_EQ(leave.Next(t0 + milliseconds(kDeadMs / 4 - 1), Seen(true, true, false)), NetLeave::Do::kWait);
  EXPECT_EQ(leave.step(), NetLeave::Step::kQuiet) << "answers still in flight";
  EXPECT_EQ(leave.Next(t0 + milliseconds(kDeadMs / 4), Seen(true, true, false)), NetLeave::Do::kPostFinals)
      << "given up on after a quarter of dead_ms";
  // Answers all in: the finals go at once.
  NetLeave quick(kHeartbeatMs, kDeadMs, kWindow);
  quick.Begin(t0, 0);
  quick.Next(t0, Seen(true, true, false));
  EXPECT_EQ(quick.Next(t0 + milliseconds(1), Seen(true, false, false)), NetLeave::Do::kPostFinals);
  // Without a window nothing is counted in flight: a few heartbeats are waited.
  NetLeave unwindowed(kHeartbeatMs, kDeadMs, 0);
  unwindowed.Begin(t0, 0);
  unwindowed.Next(t0, Seen(true, false, false));
  EXPECT_EQ(unwindowed.Next(t0 + milliseconds(4 * kHeartbeatMs - 1), Seen(true, false, false)), NetLeave::Do::kWait);
  EXPECT_EQ(unwindowed.Next(t0 + milliseconds(4 * kHeartbeatMs), Seen(true, false, false)), NetLeave::Do::kPostFinals);
  // A short dead_ms still waits 50 ms.
  NetLeave brief(5, 100, kWindow);
  brief.Begin(t0, 0);
  brief.Next(t0, Seen(true, true, false));
  EXPECT_EQ(brief.Next(t0 + milliseconds(49), Seen(true, true, false)), NetLeave::Do::kWait);
  EXPECT_EQ(brief.Next(t0 + milliseconds(50), Seen(true, true, false)), NetLeave::Do::kPostFinals);
}

TEST(NetLeaveTest, FinalsGoOutEveryHeartbeatUntilEveryoneHoldsThem) {
  NetLeave leave(kHeartbeatMs, kDeadMs, kWindow);
  const Clock::time_point t0 = Clock::now();
  leave.Begin(t0, 0);
  leave.Next(t0, Seen(true, false, false));  // quiet
  Clock::time_point t = t0 + milliseconds(1);
  ASSERT_EQ(leave.Next(t, Seen(true, false, false)), NetLeave::Do::kPostFinals);
  leave.FinalsOut(t);
  EXPECT_EQ(leave.Next(t + milliseconds(kHeartbeatMs - 1), Seen(true, false, false)), NetLeave::Do::kWait)
      << "a sweep of finals per heartbeat, not per pass";
  EXPECT_EQ(leave.Next(t + milliseconds(kHeartbeatMs), Seen(true, false, false)), NetLeave::Do::kPostFinals);
  // A sweep that ran out of slots is not counted; the next pass tries again.
  EXPECT_EQ(leave.Next(t + milliseconds(kHeartbeatMs + 1), Seen(true, false, false)), NetLeave::Do::kPostFinals);
  leave.FinalsOut(t + milliseconds(kHeartbeatMs + 1));
  EXPECT_EQ(leave.final_sweeps(), 2u);
  EXPECT_FALSE(leave.left());
  EXPECT_EQ(leave.Next(t + milliseconds(30), Seen(true, false, true)), NetLeave::Do::kLeft);
  EXPECT_TRUE(leave.left());
  EXPECT_TRUE(leave.held());
  EXPECT_EQ(leave.Next(t + milliseconds(40), Seen(true, false, true)), NetLeave::Do::kWait) << "left once";
  EXPECT_NEAR(leave.seconds(t0 + milliseconds(500)), 0.5, 1e-9);
}

TEST(NetLeaveTest, ItLeavesDeadMsAfterItWentQuietThoughNotEveryoneSaidItHoldsTheFinals) {
  NetLeave leave(kHeartbeatMs, kDeadMs, kWindow);
  const Clock::time_point t0 = Clock::now();
  leave.Begin(t0, 0);
  leave.Next(t0, Seen(true, false, false));  // quiet at t0
  for (int ms = 1; ms <= static_cast<int>(kDeadMs); ms += kHeartbeatMs) {
    const NetLeave::Do d = leave.Next(t0 + milliseconds(ms), Seen(true, false, false));
    ASSERT_NE(d, NetLeave::Do::kLeft) << "at " << ms << " ms";
    if (d == NetLeave::Do::kPostFinals) leave.FinalsOut(t0 + milliseconds(ms));
  }
  EXPECT_EQ(leave.Next(t0 + milliseconds(kDeadMs + 1), Seen(true, false, false)), NetLeave::Do::kLeft);
  EXPECT_TRUE(leave.left());
  EXPECT_FALSE(leave.held());
  EXPECT_GE(leave.final_sweeps(), kDeadMs / kHeartbeatMs - 1);
}

ControlState Told(uint32_t flags, uint64_t held) {
  ControlState s;
  s.flags = flags;
  s.held = held;
  return s;
}

TEST(NetLeaveTest, EveryoneHoldsTheFinalsWhenEveryLiveOtherMachineSaysSo) {
  const Clock::time_point t0 = Clock::now();
  NetMembers m(1, 4);  // this machine is rank 1
  m.Hear(0, t0, Told(kNetReady | kNetTraining, 0b0010), false);
  m.Hear(2, t0, Told(kNetReady | kNetTraining, 0b0000), false);
  m.Hear(3, t0, Told(kNetReady | kNetTraining, 0b1010), false);
  EXPECT_FALSE(EveryoneHolds(m)) << "machine 2 does not hold them yet";
  m.Hear(2, t0, Told(kNetReady | kNetTraining, 0b0010), false);
  EXPECT_TRUE(EveryoneHolds(m));
  m.Hear(0, t0, Told(kNetReady | kNetTraining, 0b0100), false);  // holds another machine's, not this one's
  EXPECT_FALSE(EveryoneHolds(m));
  m.CheckLiveness(t0 + milliseconds(kDeadMs + 1), kDeadMs);  // all silent: dead
  EXPECT_TRUE(EveryoneHolds(m)) << "nobody live is left to hold them";
}

}  // namespace
}  // namespace hogstream
