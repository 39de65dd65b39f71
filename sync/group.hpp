// The Group (core/group.hpp) of a Hogwild job, in its two forms:
//   SharedGroup   the solvers of one process (threads) or of several (/dev/shm), on the
//                 counters of one SolverGroup;
//   MachineGroup  one machine of a job across machines: a SharedGroup whose lead, pauses and
//                 end the network daemon (sync/net_job.hpp) decides as well.
// Waits (a follower for the end of the job, the leader for the others, a machine cut off for
// its way back) sleep on the group's futex word, which every change they may be waiting for
// moves and wakes — across processes too — each with a recheck interval for what only time
// tells (a process that stopped beating).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/group.hpp"

namespace hogstream {

// The counters Hogwild solvers share (the global iteration, the stop flag, the leader, the
// requests for it, each rank's progress and pulse): a layout private to this group's code
// (sync/solver_group.hpp; the /dev/shm region lays it out in its header), reached only
// through the named operations below.
struct SolverGroup;
constexpr int kMaxGroupSolvers = 256;  // ranks one job may have
// A group's counters in ordinary memory (a job of threads in one process).
struct SolverGroupDeleter {
  void operator()(SolverGroup* g) const;
};
using OwnedSolverGroup = std::unique_ptr<SolverGroup, SolverGroupDeleter>;
OwnedSolverGroup NewSolverGroup();

// Milliseconds on the clock SolverGroup heartbeats use (comparable across processes).
int64_t HeartbeatNowMs();
constexpr int64_t kHeartbeatStaleMs = 2000;

class SharedGroup : public Group {
 public:
  // `g` outlives this (ordinary memory, or a /dev/shm mapping); `log`: a takeover says so.
  explicit SharedGroup(SolverGroup* g, bool log = true) : g_(g), log_(log) {}

  int64_t Claim(int64_t stop_iter) override;
  int64_t Reached() const override;
  void Completed(int rank) override;
  std::vector<int64_t> Completions() const override;
  bool Leads(int rank) const override;
  bool Reports(int rank) const override;
  void SetTesting(bool on) override;
  void TakeOverIfLeaderGone(int rank) override;
  bool Stopping() const override;
  void Stop() override;
  void AwaitGo() override {}  // one process, or processes of one host: never cut off
  void Request(SolverAction a) override;
  SolverAction Pending(int64_t* seen) const override;
  int64_t SnapshotRequests() const override;
  End Finish(int rank) override;
  bool StoppedEarly() const override;
  void Ended(bool ok) override;

  // --- Named operations for the network daemon (sync/net_job.hpp), which never touches the
  // counters themselves.
  int64_t DoneBy(int rank) const;      // iterations it completed
  bool FinishedRank(int rank) const;   // its training is over
  bool Testing() const;                // a test pass runs
  bool StopRequested() const;
  bool JobDone() const;
  // The other machines' new iterations join the global iteration.
  void AddOthers(int64_t iterations);
  // A joiner takes the running job's global iteration.
  void TakeGlobalIteration(int64_t iter);
  // Snapshot requests made on other machines (the leader acts on each).
  void PassSnapshotRequests(int64_t n);
  // --- For the runner (sync/hogwild.cpp): this process's `n` ranks (the first returned), and
  // its pulse for them.
  int JoinRanks(int n);
  void Beat(int first_rank, int n, int64_t now_ms);
  bool Gone(int rank) const;
  // `rank` is a rank of the job whose process beats and which has not left on an error.
  bool Live(int rank) const;
  // `rank` left on an error (its process may still beat): it never acts again; the job stops.
  void Leave(int rank);
  // The leader's stop flag from outside a solver (another machine's), or its end of the job.
  void EndJob();
  // Moves the futex word and wakes every sleeper of every process on it: call after each
  // change a wait may be for.
  void Changed();
  // Sleeps until done() is true (true) or `deadline` passes (false), waking on each Changed
  // and at least every `recheck` (for what only time tells: a process that stopped beating).
  bool WaitUntil(const std::function<bool()>& done, std::chrono::steady_clock::time_point deadline,
                 std::chrono::milliseconds recheck = std::chrono::milliseconds(100)) const;

 protected:
  // This machine leads the job (alone: always).
  virtual bool MachineLeads() const { return true; }
  // A request to leave on notice (LEAVE): only a machine of a job across machines can (alone:
  // a warning, once).
  virtual void AskLeave();
  // This machine left the job on notice: its solvers return without waiting for its end.
  virtual bool LeftJob() const { return false; }
  // Returns once the other machines' last deltas are in these weights (alone: at once).
  virtual void AwaitDrain() {}
  // The leader's final snapshot failed on another machine (alone: never).
  virtual bool FailedElsewhere() const { return false; }
  // The final snapshot failed here (before the followers are told the job is done).
  virtual void OnFinalFailed() {}

  SolverGroup* g_;
  bool log_;
};

// One machine of a job across machines. The network daemon sets the lead (the lowest live
// machine that has the weights, on the side with a majority), pauses this machine's solvers
// while it is cut off from most of the job, holds the leader's final snapshot until the
// others' last deltas are in, and passes on the end of the job and a failed final snapshot.
class MachineGroup : public SharedGroup {
 public:
  using SharedGroup::SharedGroup;

  void AwaitGo() override;

  // --- Set by the network daemon.
  void SetLeads(bool leads);
  void SetPaused(bool paused);
  // The final snapshot waits (HoldFinal, when the daemon starts) until ReleaseFinal.
  void HoldFinal();
  void ReleaseFinal();
  // The leader (elsewhere) could not write the final snapshot: call before EndJob.
  void SetFailedElsewhere();
  // This machine leaves on notice (after leave_asked): its solvers stop after their iteration
  // and return (Finish: kFollow); the job goes on without it.
  void SetLeaving();
  void ForgetLeave() { leave_asked_.store(0); }  // a request that cannot be met (said why)
  // The longest the daemon's own waits may keep a solver: paused while cut off (the daemon
  // gives up after its quorum wait) and the final snapshot held (the daemon releases it after
  // its drain). Past them the daemon has failed: a paused solver stops the job with one line,
  // the held snapshot is taken with what is here. Before Attach's start; default an hour each.
  void set_wait_limits(std::chrono::milliseconds paused, std::chrono::milliseconds held) {
    pause_limit_ = paused;
    hold_limit_ = held;
  }

  // --- Read by the daemon and tests.
  bool leads() const { return leads_.load() != 0; }
  bool paused() const { return paused_.load() != 0; }
  bool holding_final() const { return hold_final_.load() != 0; }
  // This machine's (leading) final snapshot failed, or the leader's elsewhere did.
  bool final_failed() const { return final_failed_.load() != 0; }
  // A leave on notice was asked (SIGUSR1 on this machine).
  bool leave_asked() const { return leave_asked_.load() != 0; }
  bool leaving() const { return leaving_.load() != 0; }

 protected:
  bool MachineLeads() const override { return leads(); }
  void AwaitDrain() override;
  bool FailedElsewhere() const override { return final_failed(); }
  void OnFinalFailed() override { final_failed_.store(1); }
  void AskLeave() override;
  bool LeftJob() const override { return leaving(); }

 private:
  std::atomic<int32_t> leads_{1};
  std::atomic<int32_t> hold_final_{0};
  std::atomic<int32_t> paused_{0};
  std::atomic<int32_t> final_failed_{0};
  std::atomic<int32_t> leave_asked_{0}, leaving_{0};
  std::chrono::milliseconds pause_limit_{std::chrono::hours(1)}, hold_limit_{std::chrono::hours(1)};
};

}  // namespace hogstream
