// The membership of a job across machines (sync/net_members.hpp) on a stepped clock: death by
// silence, the leader (the lowest live ready rank, and this machine's lease), the quorum and
// its tie rule, a machine's clock bounded by what it could have run, the joiner's median view,
// the others' iterations counted once, and the slowest other machine's clock.
#include "sync/net_members.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <vector>

#include "test/test_seed.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kDeadMs = 300;

ControlState Told(uint32_t flags, int64_t clock = 0, int64_t view = 0) {
  ControlState s;
  s.flags = flags;
  s.clock = clock;
  s.view = view;
  return s;
}

// Machine `self` of `machines`, ready, having heard every other one (ready and training) at t0.
NetMembers AllHeard(int self, int machines, Clock::time_point t0) {
  NetMembers m(self, machines);
  m.set_ready(true);
  for (int r = 0; r < machines; ++r)
    if (r != self) m.Hear(r, t0, Told(kNetReady | kNetTraining), false);
  return m;
}

TEST(NetMembersTest, AMachineSilentForDeadMsIsDeadAndTheLowestLiveRankLeads) {
  const Clock::time_point t0 = Clock::now();
  NetMembers m = AllHeard(3, 4, t0);
  EXPECT_EQ(m.WatchQuorum(t0), QuorumChange::kNone);
  EXPECT_EQ(m.ChooseLeader(t0, kDeadMs), 0);
  // Machines 1 and 2 speak again; machine 0 stays silent.
  const Clock::time_point t1 = t0 + std::chrono::milliseconds(kDeadMs / 2);
  m.Hear(1, t1, Told(kNetReady | kNetTraining), false);
  m.Hear(2, t1, Told(kNetReady | kNetTraining), false);
  EXPECT_TRUE(m.CheckLiveness(t0 + std::chrono::milliseconds(kDeadMs), kDeadMs).empty()) << "dead at exactly dead_ms";
  EXPECT_EQ(m.CheckLiveness(t0 + std::chrono::milliseconds(kDeadMs + 1), kDeadMs), std::vector<int>{0});
  EXPECT_FALSE(m[0].live);
  EXPECT_FALSE(m.Live(0));
  EXPECT_EQ(m.DeadMask(), 1u);
  EXPECT_EQ(m.LiveOthers(), 2);
  const Clock::time_point t2 = t0 + std::chrono::milliseconds(kDeadMs + 1);
  EXPECT_EQ(m.WatchQuorum(t2), QuorumChange::kNone) << "3 of 4 is a majority";
  EXPECT_EQ(m.ChooseLeader(t2, kDeadMs), 1) << "the lowest live rank leads";
  EXPECT_EQ(m.ReadyRanks(), (std::vector<PeerId>{1, 2, 3}));
  // A machine that finished the job and went quiet is not dead for the data partitions.
  m.Hear(1, t2, Told(kNetReady | kNetDone), false);
  EXPECT_EQ(m.CheckLiveness(t2 + std::chrono::milliseconds(kDeadMs + 1), kDeadMs), (std::vector<int>{1, 2}));
  EXPECT_EQ(m.DeadMask(), 0b101u);
}

// A message for every live other machine goes to the group where the job multicasts, else to
// each live other machine (not this one, not the dead); an admitted machine waits to be heard.
TEST(NetMembersTest, LiveDestinationsAndAnAdmittedMachineUnheard) {
  const Clock::time_point t0 = Clock::now();
  NetMembers m = AllHeard(1, 4, t0);
  m.CheckLiveness(t0 + 100ms, 1000);
  auto ranks = [](const std::vector<Dest>& to) {
    std::vector<PeerId> r;
    for (const Dest& d : to) r.push_back(d.id);
    return r;
  };
  EXPECT_EQ(ranks(m.LiveDests(false)), (std::vector<PeerId>{0, 2, 3}));
  const std::vector<Dest> group = m.LiveDests(true);
  ASSERT_EQ(group.size(), 1u);
  EXPECT_TRUE(group[0].group);
  m.Hear(0, t0 + 900ms, Told(kNetReady | kNetTraining), false);
  m.Hear(3, t0 + 900ms, Told(kNetReady | kNetTraining), false);
  m.CheckLiveness(t0 + 1500ms, 1000);  // machine 2 silent for 1.5 s: dead
  EXPECT_EQ(ranks(m.LiveDests(false)), (std::vector<PeerId>{0, 3}));
  m.Grow(5);
  EXPECT_FALSE(m.AnyAdmittedUnheard());
  m.Admitted(4, t0 + 1500ms);
  EXPECT_TRUE(m.AnyAdmittedUnheard()) << "admitted, never heard: the next waits";
  m.Hear(4, t0 + 1600ms, Told(0), false);
  EXPECT_FALSE(m.AnyAdmittedUnheard());
}

TEST(NetMembersTest, TheLowestReadyRankLeadsNotOneStillJoining) {
  const Clock::time_point t0 = Clock::now();
  NetMembers m = AllHeard(2, 3, t0);
  m.Hear(0, t0, Told(kNetTraining), false);  // live, but without the weights yet
  EXPECT_EQ(m.ChooseLeader(t0, kDeadMs), 1);
  EXPECT_EQ(m.ReadyRanks(), (std::vector<PeerId>{1, 2}));
  EXPECT_TRUE(m.Live(0));
  EXPECT_FALSE(m.Ready(0));
  EXPECT_FALSE(m.AllLiveOthers(kNetReady));
  EXPECT_TRUE(m.AnyLiveOther(kNetReady));
}

TEST(NetMembersTest, AQuorumIsAMajorityOrExactlyHalfWithMachineZero) {
  NetMembers four(3, 4);
  EXPECT_TRUE(four.Quorum({true, true, false, false}));
  EXPECT_FALSE(four.Quorum({false, false, true, true})) << "half without machine 0";
  EXPECT_TRUE(four.Quorum({false, true, true, true}));
  EXPECT_FALSE(four.Quorum({false, false, false, true}));
  NetMembers three(0, 3);
  EXPECT_FALSE(three.Quorum({true, false, false}));
  EXPECT_TRUE(three.Quorum({true, true, false}));
  // Watched: machine 3 of 4 hears only machine 2, so it loses the quorum and nobody leads on
  // its side, though machine 2 is ready; cut off longer than quorum_ms it says so; machine 0
  // back, it regains the quorum.
  const Clock::time_point t0 = Clock::now();
  NetMembers m(3, 4);
  m.set_ready(true);
  m.Hear(2, t0, Told(kNetReady), false);
  EXPECT_EQ(m.WatchQuorum(t0), QuorumChange::kLost);
  EXPECT_FALSE(m.quorum());
  EXPECT_EQ(m.WatchQuorum(t0), QuorumChange::kNone);
  EXPECT_EQ(m.ChooseLeader(t0, kDeadMs), -1);
  EXPECT_FALSE(m.CutOffFor(t0 + 1000ms, 1000));
  EXPECT_TRUE(m.CutOffFor(t0 + 1001ms, 1000));
  m.Hear(0, t0 + 10ms, Told(kNetReady), false);
  EXPECT_EQ(m.WatchQuorum(t0 + 10ms), QuorumChange::kRegained);
  EXPECT_FALSE(m.CutOffFor(t0 + 2000ms, 1000));
  EXPECT_EQ(m.ChooseLeader(t0 + 10ms, kDeadMs), 0);
}

// The lead is a lease: a leader that has heard no majority within 3/4 of dead_ms stops leading
// while the others still take it for live (they take it for dead only after dead_ms).
TEST(NetMembersTest, ALeaderCutOffStopsLeadingBeforeTheOthersTakeItForDead) {
  const Clock::time_point t0 = Clock::now();
  NetMembers m = AllHeard(0, 3, t0);
  EXPECT_EQ(m.ChooseLeader(t0 + std::chrono::milliseconds(kDeadMs * 3 / 4), kDeadMs), 0);
  const Clock::time_point late = t0 + std::chrono::milliseconds(kDeadMs * 3 / 4 + 1);
  EXPECT_TRUE(m.CheckLiveness(late, kDeadMs).empty());
  EXPECT_EQ(m.WatchQuorum(late), QuorumChange::kNone);
  EXPECT_EQ(m.ChooseLeader(late, kDeadMs), -1) << "the lease ran out";
  // A follower's view of the leader is not a lease: machine 1 still sees machine 0 lead.
  NetMembers follower = AllHeard(1, 3, t0);
  EXPECT_EQ(follower.ChooseLeader(late, kDeadMs), 0);
}

TEST(NetMembersTest, AClockGrowsOnlyByWhatItsMachineCouldHaveRun) {
  const Clock::time_point t0 = Clock::now();
  NetMembers m(0, 2);
  m.NewRun(1, false, t0);
  EXPECT_FALSE(m.Hear(1, t0 + 1s, Told(kNetTraining, 500), false));
  EXPECT_EQ(m[1].count, 500);
  // 1e9 a second later: 64 plus 4 x 1 000 it/s (no rate known yet) over 1 s.
  EXPECT_TRUE(m.Hear(1, t0 + 2s, Told(kNetTraining, 1000000000), false));
  EXPECT_EQ(m[1].count, 500 + 64 + 4000);
  EXPECT_FALSE(m.Hear(1, t0 + 2s, Told(kNetTraining, 7), false)) << "a clock going back is not clamped";
  EXPECT_EQ(m[1].count, 500 + 64 + 4000) << "a clock never goes back";
  // A rate shown (by it, or by this machine) sets the bound: wider when faster...
  m[0].rate = 20000;
  EXPECT_FALSE(m.Hear(1, t0 + 3s, Told(kNetTraining, 4564 + 64 + 80000), false));
  EXPECT_EQ(m[1].count, 4564 + 64 + 80000);
  // ... and narrower when slower than the floor used before any is known.
  m[0].rate = 0;
  m[1].rate = 10;
  EXPECT_TRUE(m.Hear(1, t0 + 4s, Told(kNetTraining, 1000000000), false));
  EXPECT_EQ(m[1].count, 84628 + 64 + 40);
  // Its flushed clock is never above its clock; its snapshot count only grows.
  ControlState s = Told(kNetTraining, 84732);
  s.flushed = 1 << 30;
  s.snapshots = 3;
  m.Hear(1, t0 + 4s, s, false);
  EXPECT_EQ(m[1].flushed, 84732);
  s.snapshots = 1;
  m.Hear(1, t0 + 4s, s, false);
  EXPECT_EQ(m[1].snapshots, 3);
  // Its own rate not yet shown, a slower one of this machine's (a leader testing, a smaller
  // share) does not narrow the bound below 1 000 it/s.
  NetMembers slow(0, 2);
  slow[0].rate = 50;
  slow.NewRun(1, false, t0);
  EXPECT_FALSE(slow.Hear(1, t0 + 1s, Told(kNetTraining, 64 + 4000), false));
  EXPECT_EQ(slow[1].count, 64 + 4000);
  // Restarted: it counts from zero again.
  m.NewRun(1, true, t0 + 4s);
  EXPECT_EQ(m[1].count, 0);
  EXPECT_EQ(m[1].snapshots, 0);
  EXPECT_EQ(m[1].snapshots_taken, -1);
}

TEST(NetMembersTest, TheOthersIterationsAreCountedOnceAndAJoinerTakesTheirPastAsGiven) {
  const Clock::time_point t0 = Clock::now();
  NetMembers m(0, 3);
  m.Hear(1, t0, Told(kNetTraining, 40), false);
  m.Hear(2, t0, Told(kNetTraining, 60), false);
  EXPECT_EQ(m.TakeNewIterations(), 100);
  EXPECT_EQ(m.TakeNewIterations(), 0);
  m.Hear(1, t0 + 1ms, Told(kNetTraining, 45), false);
  EXPECT_EQ(m.TakeNewIterations(), 5);
  // A joiner: a machine first heard after it joined a running job is taken as it is (its past
  // is in the view), beyond any bound, and none of it is counted again.
  NetMembers joiner(0, 2);
  EXPECT_FALSE(joiner.Hear(1, t0, Told(kNetTraining, 1 << 30), true));
  EXPECT_EQ(joiner[1].count, 1 << 30);
  EXPECT_EQ(joiner.TakeNewIterations(), 0);
}

// A claim clamped by the bound is taken in full with the machine's next messages; where none
// will come (it died, left, or a restart replaced its run), the rest is settled at once, up to
// kClockSettle, so that every machine's count of the global iteration stays the same. A
// joiner takes the others' clocks as told.
TEST(NetMembersTest, AClampedClaimIsSettledWhereTheMachinesRunEnds) {
  const Clock::time_point t0 = Clock::now();
  constexpr uint32_t kDeadMs = 1000;
  NetMembers m(0, 4);
  for (int r = 1; r < 4; ++r) m.NewRun(r, false, t0);
  // Each ran 100 iterations in a burst, told at once: 64 of them taken (no time has passed).
  for (int r = 1; r < 4; ++r) EXPECT_TRUE(m.Hear(r, t0, Told(kNetTraining, 100), false));
  EXPECT_EQ(m.TakeNewIterations(), 3 * 64);
  // Machine 1 tells it again later: the rest comes with it.
  EXPECT_FALSE(m.Hear(1, t0 + 100ms, Told(kNetTraining, 100), false));
  // Machine 2 leaves on notice with that word; machine 3 falls silent and is taken for dead.
  m.Hear(2, t0 + 100ms, Told(kNetLeft, 100), false);
  m.Hear(1, t0 + 1500ms, Told(kNetTraining, 100), false);
  EXPECT_EQ(m.CheckLiveness(t0 + 1500ms, kDeadMs), std::vector<int>{3});
  EXPECT_EQ(m.TakeNewIterations(), 3 * 36) << "every machine's 100, counted once";
  for (int r = 1; r < 4; ++r) EXPECT_EQ(m[r].count, 100) << r;
  // A restart settles the last run's claim before its count starts again; beyond kClockSettle
  // a claim is not believed.
  m.Hear(1, t0 + 2s, Told(kNetTraining, int64_t{1} << 40), false);
  const int64_t taken = m[1].count;
  EXPECT_LE(taken, 100 + 64 + 4 * 1000 * 2) << "bounded while it lives (1.9 s since its count was taken)";
  EXPECT_EQ(m.Settle(1), kClockSettle);
  EXPECT_EQ(m.Settle(1), 0) << "once";
  EXPECT_EQ(m[1].count, taken + kClockSettle);
  m.NewRun(1, true, t0 + 2s);
  EXPECT_EQ(m[1].count, 0);
  EXPECT_EQ(m.Settle(1), 0) << "the new run claimed nothing yet";
  // A joiner counts the others' past as in its view: their clocks whole, none of it new.
  NetMembers joiner(0, 2);
  joiner.NewRun(1, false, t0);
  EXPECT_TRUE(joiner.Hear(1, t0, Told(kNetTraining, 5000), false));
  joiner.CountAllAsTaken();
  EXPECT_EQ(joiner[1].count, 5000);
  joiner.Hear(1, t0 + 1s, Told(kNetTraining, 5010), false);
  EXPECT_EQ(joiner.TakeNewIterations(), 10) << "only what it ran after the join";
}

// A clamped claim is doubted, not counted: an honest burst told at once is borne out by the
// machine's next messages; a claim its count never reaches is counted once, kClockBearOut after
// it was clamped or where its run ends.
TEST(NetMembersTest, AClampedClaimIsCountedOnlyWhereItIsNeverBorneOut) {
  const Clock::time_point t0 = Clock::now();
  constexpr uint32_t kDeadMs = 60000;
  NetMembers m(0, 4);
  for (int r = 1; r < 4; ++r) m.NewRun(r, false, t0);
  // Machine 1: 300 iterations told at once (clamped to 64), then 350 a tenth of a second later.
  EXPECT_TRUE(m.Hear(1, t0, Told(kNetTraining, 300), false));
  EXPECT_FALSE(m.Hear(1, t0 + 100ms, Told(kNetTraining, 350), false));
  EXPECT_EQ(m[1].count, 350);
  // Machine 2: a clock of 1e9, then its honest clocks, which never reach it.
  EXPECT_TRUE(m.Hear(2, t0, Told(kNetTraining, 1000000000), false));
  for (int s = 1; s <= 4; ++s) m.Hear(2, t0 + std::chrono::seconds(s), Told(kNetTraining, 1000 * s), false);
  m.CheckLiveness(t0 + kClockBearOut - 1ms, kDeadMs);
  EXPECT_EQ(m.unbacked(), 0u) << "judged before kClockBearOut has passed";
  m.CheckLiveness(t0 + kClockBearOut + 1ms, kDeadMs);
  EXPECT_EQ(m.unbacked(), 1u) << "machine 2's claim, not machine 1's burst";
  m.CheckLiveness(t0 + 2 * kClockBearOut, kDeadMs);
  EXPECT_EQ(m.unbacked(), 1u) << "once";
  // Machine 3: a claim beyond kClockSettle, then its run ends.
  EXPECT_TRUE(m.Hear(3, t0 + 1s, Told(kNetTraining, int64_t{1} << 40), false));
  EXPECT_EQ(m.Settle(3), kClockSettle);
  EXPECT_EQ(m.unbacked(), 2u) << "a run that ended short of its claim";
  // A burst that its run's end settles in full is borne out.
  m.NewRun(3, true, t0 + 2s);
  EXPECT_TRUE(m.Hear(3, t0 + 2s, Told(kNetTraining, 500), false));
  m.Settle(3);
  EXPECT_EQ(m[3].count, 500);
  EXPECT_EQ(m.unbacked(), 2u);
}

TEST(NetMembersTest, AJoinerTakesTheMedianOfTheViewsOfTheMachinesTraining) {
  const Clock::time_point t0 = Clock::now();
  NetMembers m(0, 5);
  EXPECT_FALSE(m.AnyTraining());
  EXPECT_EQ(m.MedianView(), 0);
  m.Hear(1, t0, Told(kNetReady | kNetTraining, 0, 5200), false);
  m.Hear(2, t0, Told(kNetReady | kNetTraining, 0, int64_t{1} << 40), false);  // absurd
  m.Hear(3, t0, Told(kNetReady | kNetTraining, 0, 5000), false);
  m.Hear(4, t0, Told(kNetReady, 0, 1), false);  // not training: its view is not one of theirs
  EXPECT_TRUE(m.AnyTraining());
  EXPECT_EQ(m.MedianView(), 5200);
  m.Hear(4, t0, Told(kNetReady | kNetTraining, 0, 0), false);
  EXPECT_EQ(m.MedianView(), 5000) << "the lower of the two middle views";
}

TEST(NetMembersTest, TheSlowestOtherMachineIsOfThisOnesGroupByItsFlushedClock) {
  const Clock::time_point t0 = Clock::now();
  NetMembers m(0, 4);
  ControlState s = Told(kNetTraining, 100);
  s.flushed = 90;
  m.Hear(1, t0, s, false);
  s = Told(kNetTraining, 50);
  s.flushed = 40;
  m.Hear(2, t0, s, false);
  m.Hear(3, t0, Told(kNetTraining | kNetFinished, 1), false);  // finished: not waited for
  EXPECT_EQ(m.SlowestOther({}, 7), 50);
  EXPECT_EQ(m.SlowestOther({0, 0, 1, 1}, 7), 90) << "machine 2 is of another group";
  EXPECT_EQ(m.SlowestOther({0, 1, 1, 0}, 7), 7) << "none of its group is training: its own count";
}

// The clock a policy bounds is per solver: a machine of 4 solvers that ran 120 iterations is
// at 30 per solver, behind one of 1 solver at 40; with synchronous groups, its flushed count
// over its solvers. A machine that told no solver count is one solver.
TEST(NetMembersTest, TheSlowestOtherMachineIsCountedPerSolver) {
  const Clock::time_point t0 = Clock::now();
  NetMembers m(0, 3);
  ControlState s = Told(kNetTraining, 120);
  s.solvers = 4;
  s.flushed = 100;
  m.Hear(1, t0, s, false);
  s = Told(kNetTraining, 40);
  s.flushed = 40;
  m.Hear(2, t0, s, false);
  EXPECT_EQ(m.SlowestOther({}, 7), 30) << "machine 1: 120 iterations over 4 solvers";
  EXPECT_EQ(m.SlowestOther({0, 0, 0}, 7), 25) << "machine 1: 100 flushed over 4 solvers";
  s = Told(kNetTraining, 160);
  s.solvers = 4;
  m.Hear(1, t0, s, false);
  EXPECT_EQ(m.SlowestOther({}, 7), 40) << "machine 1 at 40 per solver, machine 2 at 40";
}

// Random rosters: the leader is always the lowest ready rank among the live ones where there is a
// quorum, and none where there is not.
TEST(NetMembersTest, RandomRostersLeadByTheLowestLiveReadyRank) {
  std::mt19937 rng(TestSeed());
  for (int trial = 0; trial < 500; ++trial) {
    const int machines = 1 + static_cast<int>(rng() % 7), self = static_cast<int>(rng() % machines);
    const Clock::time_point t0 = Clock::now();
    NetMembers m(self, machines);
    m.set_ready(rng() & 1);
    std::vector<bool> live(machines, false), ready(machines, false);
    live[self] = true;
    ready[self] = m.ready();
    for (int r = 0; r < machines; ++r) {
      if (r == self || (rng() % 3) == 0) continue;
      live[r] = true;
      ready[r] = rng() & 1;
      m.Hear(r, t0, Told(ready[r] ? uint32_t{kNetReady} : 0u), false);
    }
    const int n = static_cast<int>(std::count(live.begin(), live.end(), true));
    const bool quorum = 2 * n > machines || (2 * n == machines && live[0]);
    m.WatchQuorum(t0);
    ASSERT_EQ(m.quorum(), quorum) << machines << " machines, " << n << " live";
    int want = -1;
    for (int r = 0; quorum && r < machines && want < 0; ++r)
      if (ready[r]) want = r;
    ASSERT_EQ(m.ChooseLeader(t0, kDeadMs), want) << "trial " << trial;
  }
}

}  // namespace
}  // namespace hogstream

namespace hogstream {
namespace HS_UNITY_ID {

TEST(NetMembersTest, AMachineAdmittedButNotYetHeardHoldsTheNextBack) {
  const auto t0 = std::chrono::steady_clock::now();
  NetMembers m(0, 2);
  EXPECT_FALSE(m.AnyAdmittedUnheard());
  m.Grow(3);
  m[2].admitted = true;
  EXPECT_TRUE(m.AnyAdmittedUnheard());
  m.Hear(2, t0, ControlState{}, false);
  EXPECT_FALSE(m.AnyAdmittedUnheard()) << "heard: the next may be admitted";
  m.Grow(4);
  m[3].admitted = true;
  m[3].left = true;
  EXPECT_FALSE(m.AnyAdmittedUnheard()) << "one that left holds nothing back";
}

}  // namespace
}  // namespace hogstream
