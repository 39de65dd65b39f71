// The bridge between a job across machines and this machine's group (sync/net_bridge.hpp), with
// a real group and membership on a stepped clock: the others' iterations counted once, a stop
// from the leader ends the group's training while another machine's is only a request,
// snapshot requests passed once and never echoed, the leader's done ends the job (and says who
// ended it), the quorum pauses the group and asks for a re-take, the leader is told.
#include "sync/net_bridge.hpp"
#include "sync/solver_group.hpp"  // (stand-in solvers write the counters)

#include <gtest/gtest.h>

#include <chrono>
#include <memory>

namespace hogstream {
namespace HS_UNITY_ID {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
constexpr uint32_t kDeadMs = 300, kQuorumMs = 3000;

ControlState Told(uint32_t flags, int64_t clock = 0, int64_t snapshots = 0) {
  ControlState s;
  s.flags = flags;
  s.clock = clock;
  s.snapshots = snapshots;
  return s;
}

struct Bridged {
  explicit Bridged(int rank, int machines) : members(rank, machines), bridge(rank, kDeadMs, kQuorumMs), end(5000) {
    bridge.set_group(group.get());
    members.set_ready(true);
  }
  std::unique_ptr<SolverGroup> counters = std::make_unique<SolverGroup>();
  std::unique_ptr<MachineGroup> group = std::make_unique<MachineGroup>(counters.get(), false);
  NetMembers members;
  NetBridge bridge;
  NetEnd end;
};

TEST(NetBridgeTest, TheOthersIterationsJoinTheGlobalIterationOnce) {
  Bridged b(0, 3);
  const Clock::time_point t0 = Clock::now();
  b.members.Hear(1, t0, Told(kNetReady | kNetTraining, 40), false);
  b.members.Hear(2, t0, Told(kNetReady | kNetTraining, 25), false);
  b.bridge.CountOthers(b.members);
  EXPECT_EQ(b.counters->iter.load(), 65);
  b.bridge.CountOthers(b.members);
  EXPECT_EQ(b.counters->iter.load(), 65) << "counted once";
  b.members.Hear(1, t0, Told(kNetReady | kNetTraining, 50), false);
  b.bridge.CountOthers(b.members);
  EXPECT_EQ(b.counters->iter.load(), 75);
}

TEST(NetBridgeTest, TheLeadersStopEndsTrainingAnotherMachinesIsARequest) {
  Bridged b(2, 3);
  const Clock::time_point t0 = Clock::now();
  b.members.Hear(0, t0, Told(kNetReady | kNetTraining), false);
  b.members.Hear(1, t0, Told(kNetReady | kNetTraining | kNetStop), false);
  ASSERT_EQ(b.bridge.ChooseLeader(t0, b.members), -1);
  ASSERT_EQ(b.bridge.leader(), 0);
  b.bridge.PassRequests(b.members, b.end);
  EXPECT_EQ(b.counters->stop_requested.load(), 1) << "machine 1's signal: a request to the leader";
  EXPECT_EQ(b.counters->stop.load(), 0) << "... not a stop here";
  EXPECT_FALSE(b.end.stopped());
  b.members.Hear(0, t0, Told(kNetReady | kNetTraining | kNetStop), false);
  b.bridge.PassRequests(b.members, b.end);
  EXPECT_EQ(b.counters->stop.load(), 1) << "the leader's stop: every machine stops now";
  EXPECT_TRUE(b.end.stopped());
  EXPECT_TRUE(b.end.stop()) << "its own stop flag, passed on in its word";
}

TEST(NetBridgeTest, SnapshotRequestsArePassedOnOnceAndNeverEchoed) {
  Bridged b(0, 2);
  const Clock::time_point t0 = Clock::now();
  b.members.Hear(1, t0, Told(kNetReady | kNetTraining, 0, 3), false);
  b.bridge.PassRequests(b.members, b.end);
  EXPECT_EQ(b.counters->snapshot_requests.load(), 0) << "its count when first heard is where it starts";
  b.members.Hear(1, t0, Told(kNetReady | kNetTraining, 0, 5), false);
  b.bridge.PassRequests(b.members, b.end);
  b.bridge.PassRequests(b.members, b.end);
  EXPECT_EQ(b.counters->snapshot_requests.load(), 2) << "two more on machine 1, passed once";
  EXPECT_EQ(b.bridge.snapshots_passed(), 2) << "left out of what this machine tells (no echo)";
}

TEST(NetBridgeTest, TheLeadersDoneEndsTheJobHereAndSaysWhoEndedIt) {
  Bridged b(1, 3);
  const Clock::time_point t0 = Clock::now();
  b.counters->iter.store(777);
  b.members.Hear(0, t0, Told(kNetReady | kNetTraining | kNetDone | kNetKeep), false);
  b.members.Hear(2, t0, Told(kNetReady | kNetTraining), false);
  b.bridge.ChooseLeader(t0, b.members);
  EXPECT_FALSE(b.bridge.PassRequests(b.members, b.end)) << "machine 2 has not said done";
  EXPECT_EQ(b.counters->job_done.load(), 1);
  EXPECT_TRUE(b.group->final_failed()) << "the leader's final snapshot failed: each machine keeps its own";
  EXPECT_TRUE(b.end.done());
  EXPECT_EQ(b.end.ended_by(), 0);
  EXPECT_EQ(b.end.ended_at(), 777);
  b.members.Hear(2, t0, Told(kNetReady | kNetTraining | kNetDone), false);
  EXPECT_TRUE(b.bridge.PassRequests(b.members, b.end)) << "every live machine done now";
  EXPECT_TRUE(b.end.all_done());
  EXPECT_EQ(b.end.ended_by(), 0) << "the first word counts";
}

TEST(NetBridgeTest, CutOffTheGroupWaitsAndBackItReTakesTheWeights) {
  Bridged b(2, 3);
  const Clock::time_point t0 = Clock::now();
  b.members.Hear(0, t0, Told(kNetReady | kNetTraining), false);
  b.members.Hear(1, t0, Told(kNetReady | kNetTraining), false);
  EXPECT_EQ(b.bridge.WatchQuorum(t0, b.members, true, true, false), NetBridge::Quorum::kHeld);
  const Clock::time_point t1 = t0 + milliseconds(kDeadMs + 1);
  b.members.CheckLiveness(t1, kDeadMs);
  EXPECT_EQ(b.bridge.WatchQuorum(t1, b.members, true, true, false), NetBridge::Quorum::kLost);
  EXPECT_TRUE(b.group->paused());
  const Clock::time_point t2 = t1 + milliseconds(100);
  b.members.Hear(0, t2, Told(kNetReady | kNetTraining), false);
  EXPECT_EQ(b.bridge.WatchQuorum(t2, b.members, true, true, false), NetBridge::Quorum::kRetake);
  EXPECT_TRUE(b.group->paused()) << "its solvers wait until it has the weights";
  // Not training (still starting, say): back, it simply goes on.
  Bridged s(2, 3);
  s.members.Hear(0, t0, Told(kNetReady), false);
  s.members.Hear(1, t0, Told(kNetReady), false);
  s.members.CheckLiveness(t1, kDeadMs);
  EXPECT_EQ(s.bridge.WatchQuorum(t1, s.members, false, false, false), NetBridge::Quorum::kLost);
  s.members.Hear(0, t2, Told(kNetReady), false);
  EXPECT_EQ(s.bridge.WatchQuorum(t2, s.members, false, false, false), NetBridge::Quorum::kHeld);
  EXPECT_FALSE(s.group->paused());
  // Cut off for quorum_ms: it gives up.
  Bridged g(2, 3);
  g.members.Hear(0, t0, Told(kNetReady | kNetTraining), false);
  g.members.Hear(1, t0, Told(kNetReady | kNetTraining), false);
  g.members.CheckLiveness(t1, kDeadMs);
  g.bridge.WatchQuorum(t1, g.members, true, true, false);
  EXPECT_EQ(g.bridge.WatchQuorum(t1 + milliseconds(kQuorumMs), g.members, true, true, false), NetBridge::Quorum::kHeld)
      << "the loss is reported once";
  EXPECT_EQ(g.bridge.WatchQuorum(t1 + milliseconds(kQuorumMs + 1), g.members, false, false, false),
            NetBridge::Quorum::kHeld)
      << "not past its start: it waits for the others";
  EXPECT_EQ(g.bridge.WatchQuorum(t1 + milliseconds(kQuorumMs + 1), g.members, true, true, false),
            NetBridge::Quorum::kGaveUp);
}

TEST(NetBridgeTest, TheGroupIsToldWhetherItLeads) {
  Bridged b(0, 2);
  const Clock::time_point t0 = Clock::now();
  b.members.Hear(1, t0, Told(kNetReady | kNetTraining), false);
  EXPECT_EQ(b.bridge.ChooseLeader(t0, b.members), -1) << "from none";
  EXPECT_TRUE(b.group->leads());
  EXPECT_EQ(b.bridge.ChooseLeader(t0, b.members), -2) << "no change";
  b.members.set_leaving(true);
  EXPECT_EQ(b.bridge.ChooseLeader(t0, b.members), 0);
  EXPECT_EQ(b.bridge.leader(), 1);
  EXPECT_FALSE(b.group->leads()) << "a machine leaving on notice does not lead";
}

}  // namespace
}  // namespace hogstream
