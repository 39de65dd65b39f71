// Group: the job a solver trains in, as the engine sees it — without knowing how the weights
// are shared (threads on one buffer, private copies, /dev/shm processes, machines). The
// engine asks it for the next global iteration, whether this solver leads (tests, displays,
// snapshots), whether to pause or stop, the requests to act on, and, at the end, whether and
// when this solver takes the job's final snapshot. Implementations: sync/group.hpp.
//
// Thread rules: every call may come from any solver thread of the job at any time; waits
// (AwaitGo, Finish) block the calling solver only, each with its own deadline.
#pragma once

#include <cstdint>
#include <vector>

namespace hogstream {

// What a caller (signal handler, supervisor) asks the solver to do between iterations. LEAVE:
// this machine leaves a job across machines on notice (its progress and chunks handed to the
// others); the job goes on.
enum class SolverAction { NONE, STOP, SNAPSHOT, LEAVE };

class Group {
 public:
  virtual ~Group() = default;

  // --- The global iteration (the sum of every solver's iterations: the lr schedule, display,
  // test and snapshot intervals and max_iter run on it).
  // Claims the next iteration below stop_iter; returns >= stop_iter, claiming nothing, once
  // the count has reached it.
  virtual int64_t Claim(int64_t stop_iter) = 0;
  // The global iteration reached so far (this machine's view, across machines).
  virtual int64_t Reached() const = 0;
  // `rank` completed an iteration (its own count, for the leader's display).
  virtual void Completed(int rank) = 0;
  // Iterations each rank of the job's shared counters completed so far (index: rank).
  virtual std::vector<int64_t> Completions() const = 0;

  // --- Who leads: exactly one solver of the job tests, displays and snapshots.
  virtual bool Leads(int rank) const = 0;
  // Whether `rank` hands its machine's display figures to the stats sink: the leader, and on a
  // machine that does not lead the job, the solver that would lead it there.
  virtual bool Reports(int rank) const { return Leads(rank); }
  // A solver of this group begins (on) or ends a test pass: its machine's rate falls meanwhile,
  // which is not a straggler's lag.
  virtual void SetTesting(bool on) { (void)on; }
  // The leader stopped responding: the lowest live rank takes over (and says so in the log).
  virtual void TakeOverIfLeaderGone(int rank) = 0;

  // --- Stopping and pausing.
  virtual bool Stopping() const = 0;
  // Every solver finishes its current iteration and returns (a stop request acted on, an error).
  virtual void Stop() = 0;
  // Returns when this solver may run its next iteration: at once, or once its machine, cut
  // off from most of its job, is back (or the job stops).
  virtual void AwaitGo() = 0;

  // --- Requests from any process of the job (a signal it received), acted on by the leader.
  virtual void Request(SolverAction a) = 0;
  // For the leader, the request to act on now: STOP once asked; SNAPSHOT each time the
  // snapshot requests moved past `*seen` (which moves on); else NONE.
  virtual SolverAction Pending(int64_t* seen) const = 0;
  // The snapshot requests counted so far (a starting point for Pending).
  virtual int64_t SnapshotRequests() const = 0;

  // --- The end of the job: the one place its final-snapshot rule lives.
  enum class End {
    kTakeFinal,  // this solver leads: every other solver of the job has finished and its last
                 // progress is in the weights; take the final snapshot, then call Ended
    kFollow,     // the leader ended the job: return
    kKeepCopy,   // the leader's final snapshot failed elsewhere: keep this machine's copy
  };
  // Called once by each solver after its last iteration (and after handing in its last
  // progress): counts it finished and waits for its part of the end.
  virtual End Finish(int rank) = 0;
  // After kTakeFinal: whether the job was stopped early (a stop request, an error) rather
  // than run to its planned iteration.
  virtual bool StoppedEarly() const = 0;
  // The leader's final snapshot was written (`ok`) or failed; the followers stop waiting.
  virtual void Ended(bool ok) = 0;
  // Whether the snapshot due at the job's last iteration waits for the end (Finish: every
  // solver done, every last progress in), rather than being taken as the count reaches it.
  virtual bool FinalSnapshotAtTheEnd() const { return true; }
};

// A solver alone (the null group): it is its own count (`iter`, the solver's), leads, never
// waits, and acts on its own requests; Caffe's single solver, unchanged. The solver makes one
// for itself until it joins a group. `log`: the solver's SolverOptions::log (its one warning).
class LoneGroup final : public Group {
 public:
  LoneGroup(const int* iter, const bool* log) : iter_(iter), log_(log) {}
  int64_t Claim(int64_t) override { return *iter_; }
  int64_t Reached() const override { return *iter_; }
  void Completed(int) override {}
  std::vector<int64_t> Completions() const override { return {}; }  // (no per-solver figures)
  bool Leads(int) const override { return true; }
  void TakeOverIfLeaderGone(int) override {}
  bool Stopping() const override { return false; }  // (a stop request ends its loop itself)
  void Stop() override {}
  void AwaitGo() override {}
  // STOP and SNAPSHOT are its own to act on; LEAVE is for a machine of a job: a warning.
  void Request(SolverAction a) override;
  SolverAction Pending(int64_t* seen) const override {
    if (stop_asked_) return SolverAction::STOP;
    if (snapshots_ == *seen) return SolverAction::NONE;
    *seen = snapshots_;
    return SolverAction::SNAPSHOT;
  }
  int64_t SnapshotRequests() const override { return snapshots_; }
  End Finish(int) override { return End::kTakeFinal; }
  bool StoppedEarly() const override { return false; }  // (the solver knows its own stop)
  void Ended(bool) override {}
  bool FinalSnapshotAtTheEnd() const override { return false; }

 private:
  const int* iter_;
  const bool* log_;
  bool stop_asked_ = false;
  int64_t snapshots_ = 0;
};

}  // namespace hogstream
