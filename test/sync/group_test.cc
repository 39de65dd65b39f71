// The group a solver trains in (core/group.hpp, sync/group.*): the end of the job — who
// takes the final snapshot and when — and the waits that get there.
#include "sync/group.hpp"
#include "sync/solver_group.hpp"

#include <gtest/gtest.h>
#include <google/protobuf/text_format.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <future>
#include <thread>

#include "core/io.hpp"
#include "core/solver.hpp"
#include "test/program_runner.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Both ranks beating now (stale after kHeartbeatStaleMs: every test here ends well before).
void Beat(SolverGroup& g, int ranks) {
  g.solvers.store(ranks);
  for (int r = 0; r < ranks; ++r) g.heartbeat_ms[r].store(HeartbeatNowMs());
}

double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

// Whatever a test asserted, its Finish threads return before their futures are destroyed (a
// future of std::async waits for its thread): every rank finished, the job ended, bounded.
struct EndsTheJob {
  SolverGroup& g;
  SharedGroup& group;
  ~EndsTheJob() {
    for (int r = 0; r < SolverGroup::kMaxSolvers; ++r) g.finished[r].store(1);
    group.EndJob();
  }
};

// A wait sleeps until a change wakes it, not until its recheck interval comes round.
TEST(GroupTest, AWaitWakesOnAChangeNotOnItsRecheck) {
  SolverGroup g;
  SharedGroup group(&g, false);
  std::atomic<bool> flag{false};
  std::thread changer([&] {
    std::this_thread::sleep_for(50ms);
    flag.store(true);
    group.Changed();
  });
  const auto t0 = Clock::now();
  const bool woke = group.WaitUntil([&] { return flag.load(); }, t0 + 20s, 10s);
  const double took = Seconds(t0);
  changer.join();
  EXPECT_TRUE(woke);
  EXPECT_LT(took, 5.0) << "the wait slept to its 10 s recheck: Changed woke nobody";
  // And the deadline holds where nothing changes.
  const auto t1 = Clock::now();
  EXPECT_FALSE(group.WaitUntil([] { return false; }, t1 + 150ms, 10s));
  EXPECT_LT(Seconds(t1), 5.0);
}

// The processes of a /dev/shm job sleep on the same word: a change in one wakes the others.
TEST(GroupTest, AWaitWakesAcrossProcesses) {
  void* mem = mmap(nullptr, sizeof(SolverGroup), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  auto* g = new (mem) SolverGroup();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // waits for the parent's stop: 0 when woken within 5 s, not at the 10 s recheck
    SharedGroup group(g, false);
    const auto t0 = Clock::now();
    const bool stopped = group.WaitUntil([&] { return group.Stopping(); }, t0 + 20s, 10s);
    _exit(stopped && Seconds(t0) < 5.0 ? 0 : 1);
  }
  std::this_thread::sleep_for(200ms);  // the child asleep by now (or it sees the stop at once)
  SharedGroup(g, false).Stop();
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);  // the child's own deadline bounds this (20 s)
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "the other process was not woken by the change (status " << status << ")";
  munmap(mem, sizeof(SolverGroup));
}

// The leader waits for the others; a stop request that reaches it meanwhile stops them; the
// job then ends as stopped early.
TEST(GroupTest, TheLeaderWaitsForTheOthersAndPassesOnAStopRequest) {
  SolverGroup g;
  Beat(g, 2);
  SharedGroup group(&g, false);
  auto finish = std::async(std::launch::async, [&] { return group.Finish(0); });
  EndsTheJob bounded{g, group};
  EXPECT_EQ(finish.wait_for(200ms), std::future_status::timeout) << "the leader did not wait for rank 1";
  EXPECT_EQ(g.stop.load(), 0);
  group.Request(SolverAction::STOP);  // a signal to rank 1's process
  const auto t0 = Clock::now();
  while (!g.stop.load() && Seconds(t0) < 5) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(g.stop.load(), 1) << "the waiting leader did not stop the others";
  g.finished[1].store(1);
  group.Changed();
  ASSERT_EQ(finish.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(finish.get(), Group::End::kTakeFinal);
  EXPECT_TRUE(group.StoppedEarly());
}

// A follower whose leader stopped beating takes over the end of the job.
TEST(GroupTest, AFollowerTakesTheEndOverFromALeaderThatStoppedBeating) {
  SolverGroup g;
  Beat(g, 2);
  g.heartbeat_ms[0].store(HeartbeatNowMs() - 2 * kHeartbeatStaleMs);  // rank 0, the leader, is dead
  SharedGroup group(&g, false);
  auto finish = std::async(std::launch::async, [&] { return group.Finish(1); });
  EndsTheJob bounded{g, group};
  ASSERT_EQ(finish.wait_for(5s), std::future_status::ready) << "the follower waits for a dead leader";
  EXPECT_EQ(finish.get(), Group::End::kTakeFinal);
  EXPECT_EQ(g.leader.load(), 1);
}

// A machine that does not lead: its solvers return when the leader (elsewhere) ends the job;
// where the leader's final snapshot failed, the solver that leads on this machine keeps its copy.
TEST(GroupTest, AMachineThatDoesNotLeadFollowsOrKeepsItsCopy) {
  for (const bool failed : {false, true}) {
    SCOPED_TRACE(failed ? "the leader's final snapshot failed" : "the leader's final snapshot written");
    SolverGroup g;
    Beat(g, 2);
    MachineGroup group(&g, false);
    group.SetLeads(false);
    auto first = std::async(std::launch::async, [&] { return group.Finish(0); });
    auto second = std::async(std::launch::async, [&] { return group.Finish(1); });
    EndsTheJob bounded{g, group};
    EXPECT_EQ(first.wait_for(200ms), std::future_status::timeout) << "it ended before the leader did";
    if (failed) group.SetFailedElsewhere();
    group.EndJob();  // the network daemon hears the leader's "done"
    ASSERT_EQ(first.wait_for(5s), std::future_status::ready);
    ASSERT_EQ(second.wait_for(5s), std::future_status::ready);
    EXPECT_EQ(first.get(), failed ? Group::End::kKeepCopy : Group::End::kFollow);
    EXPECT_EQ(second.get(), Group::End::kFollow);
  }
}

// The daemon's own waits have limits: a machine paused longer than its daemon could keep it
// (the daemon failed) stops with one line; a final snapshot held longer is taken anyway.
TEST(GroupTest, ThePauseAndTheFinalHoldEndAtTheirLimits) {
  SolverGroup g;
  Beat(g, 1);
  MachineGroup group(&g, false);
  group.set_wait_limits(300ms, 300ms);
  group.SetPaused(true);
  auto go = std::async(std::launch::async, [&] {
    group.AwaitGo();
    return group.Stopping();
  });
  EXPECT_EQ(go.wait_for(150ms), std::future_status::timeout) << "a paused machine waits";
  ASSERT_EQ(go.wait_for(5s), std::future_status::ready) << "the pause outlived its limit";
  EXPECT_TRUE(go.get()) << "past the limit the job stops";
  SolverGroup h;
  Beat(h, 1);
  MachineGroup held(&h, false);
  held.set_wait_limits(300ms, 300ms);
  held.HoldFinal();
  const auto t0 = Clock::now();
  auto finish = std::async(std::launch::async, [&] { return held.Finish(0); });
  EndsTheJob bounded{h, held};
  ASSERT_EQ(finish.wait_for(5s), std::future_status::ready) << "the hold outlived its limit";
  EXPECT_EQ(finish.get(), Group::End::kTakeFinal);
  EXPECT_GE(Seconds(t0), 0.29) << "the hold was kept until its limit";
}

// The leader's final snapshot holds what arrives in the network drain: Solve takes it only
// once the daemon releases the hold. (Skip the drain, and the snapshot misses the others' last
// deltas — here, the value written into the weights just before the release.)
TEST(GroupTest, TheFinalSnapshotWaitsForTheNetworkDrain) {
  test::ScratchDir dir("group");
  const std::string prefix = dir / "drain";
  pb::SolverParameter p;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      R"(net_param {
           layer { name: "in" type: "Input" top: "x" top: "y"
                   input_param { shape { dim: 4 dim: 3 } shape { dim: 4 dim: 2 } } }
           layer { name: "ip" type: "InnerProduct" bottom: "x" top: "yhat"
                   inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.5 } } }
           layer { name: "loss" type: "EuclideanLoss" bottom: "yhat" bottom: "y" top: "loss" } }
         base_lr: 0.01 lr_policy: 'fixed' max_iter: 30 solver_mode: CPU random_seed: 3
         snapshot_after_train: true snapshot_prefix: ')" + prefix + "'",
      &p));
  SolverGroup g;
  Beat(g, 1);
  MachineGroup group(&g, false);
  group.HoldFinal();  // as the network daemon does when it attaches
  SolverOptions o;
  o.log = false;
  auto solver = CreateSolver(p, o);
  solver->JoinGroup(&group, 0);
  for (Blob* b : solver->net().input_blobs())
    for (int i = 0; i < b->count(); ++i) b->mutable_cpu_data()[i] = 0.1f * static_cast<float>(i % 7) - 0.3f;
  constexpr float kTheirs = 1234.5f;  // the others' last delta, applied during the drain
  std::thread daemon([&] {
    const auto t0 = Clock::now();
    while (!g.finished[0].load() && Seconds(t0) < 20) std::this_thread::sleep_for(1ms);
    std::this_thread::sleep_for(300ms);
    solver->net().param_data()[0] = kTheirs;
    group.ReleaseFinal();
  });
  solver->Solve();
  daemon.join();
  pb::NetParameter saved;
  ReadBinaryProto(prefix + "_iter_30.caffemodel", &saved);
  const pb::LayerParameter* ip = nullptr;
  for (const auto& l : saved.layer())
    if (l.name() == "ip") ip = &l;
  ASSERT_NE(ip, nullptr);
  ASSERT_GT(ip->blobs(0).data_size(), 0);
  EXPECT_EQ(ip->blobs(0).data(0), kTheirs) << "the final snapshot was taken before the network drain ended";
}

}  // namespace
}  // namespace hogstream
