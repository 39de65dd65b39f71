#include "sync/group.hpp"
#include "sync/solver_group.hpp"

#include <algorithm>

#include <glog/logging.h>

#include "base/futex.hpp"

namespace hogstream {

using Clock = std::chrono::steady_clock;

int64_t HeartbeatNowMs() {
  // steady_clock is CLOCK_MONOTONIC on Linux: one clock for every process of a host.
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch()).count();
}

int64_t SharedGroup::Claim(int64_t stop_iter) {
  // Never past stop_iter: the global count ends exactly at max_iter, and no solver runs an
  // iteration beyond it (where poly's lr is NaN) whatever its own count says.
  std::atomic<int64_t>& next = g_->iter;
  int64_t it = next.load(std::memory_order_relaxed);
  while (it < stop_iter && !next.compare_exchange_weak(it, it + 1, std::memory_order_relaxed)) {
  }
  return it;
}

void SharedGroup::Completed(int rank) { g_->done[rank].fetch_add(1, std::memory_order_relaxed); }

std::vector<int64_t> SharedGroup::Completions() const {
  const int n = std::clamp(g_->solvers.load(), 0, SolverGroup::kMaxSolvers);
  std::vector<int64_t> done(n);
  for (int r = 0; r < n; ++r) done[r] = g_->done[r].load(std::memory_order_relaxed);
  return done;
}

// The machine's own leader reports its figures whether or not its machine leads the job.
bool SharedGroup::Reports(int rank) const { return g_->leader.load(std::memory_order_relaxed) == rank; }

bool SharedGroup::Leads(int rank) const {
  return g_->leader.load(std::memory_order_relaxed) == rank && MachineLeads();
}

bool SharedGroup::Live(int r) const {
  // A rank read from shared memory is checked before it indexes anything.
  if (r < 0 || r >= SolverGroup::kMaxSolvers || g_->gone[r].load(std::memory_order_relaxed)) return false;
  const int64_t hb = g_->heartbeat_ms[r].load(std::memory_order_relaxed);
  return hb > 0 && HeartbeatNowMs() - hb < kHeartbeatStaleMs;
}

void SharedGroup::TakeOverIfLeaderGone(int rank) {
  // A leader whose process stopped beating is gone (killed): the lowest live rank takes over
  // testing, display, snapshots and the end of the job.
  const int32_t current = g_->leader.load();
  if (current == rank || Live(current)) return;
  const int n = std::min(g_->solvers.load(), SolverGroup::kMaxSolvers);
  for (int r = 0; r < n; ++r) {
    if (!Live(r)) continue;
    if (r != rank) return;  // a lower live rank takes over
    int32_t expected = current;
    if (!g_->leader.compare_exchange_strong(expected, r)) return;
    Changed();
    LOG_IF(INFO, log_) << "Solver " << r << " takes over testing and snapshots from solver " << current
                       << ", which stopped responding";
    return;
  }
}

void SharedGroup::Stop() {
  g_->stop.store(1);
  Changed();
}

void SharedGroup::Leave(int rank) {
  if (rank >= 0 && rank < SolverGroup::kMaxSolvers) {
    // Gone at once, though its process still beats: if it led, another takes over.
    g_->gone[rank].store(1);
    g_->finished[rank].store(1);
  }
  Stop();
}

void SharedGroup::EndJob() {
  g_->stop.store(1);
  g_->job_done.store(1);
  Changed();
}

void SharedGroup::Request(SolverAction a) {
  if (a == SolverAction::LEAVE) return AskLeave();
  if (a == SolverAction::SNAPSHOT) g_->snapshot_requests.fetch_add(1);
  if (a == SolverAction::STOP) {
    g_->stop_requested.store(1);
    Changed();  // a leader waiting for the others stops them
  }
}

SolverAction SharedGroup::Pending(int64_t* seen) const {
  if (g_->stop_requested.load()) return SolverAction::STOP;
  const int64_t requests = g_->snapshot_requests.load();
  if (requests == *seen) return SolverAction::NONE;
  *seen = requests;
  return SolverAction::SNAPSHOT;
}

Group::End SharedGroup::Finish(int rank) {
  g_->finished[rank].store(1);
  Changed();
  // A follower waits for the leader's end of the job; it takes over if the leader dies (and,
  // across machines, when its machine comes to lead the job).
  End end = End::kTakeFinal;
  WaitUntil(
      [&] {
        if (LeftJob()) {  // this machine left the job on notice: its end is not this one's
          end = End::kFollow;
          return true;
        }
        if (Leads(rank)) return true;
        if (g_->job_done.load()) {
          // The leader on another machine could not write the final snapshot: this machine's
          // copy is kept too (by its solver that leads here), and the job ends in error.
          end = FailedElsewhere() && !MachineLeads() && g_->leader.load() == rank ? End::kKeepCopy : End::kFollow;
          return true;
        }
        TakeOverIfLeaderGone(rank);
        return Leads(rank);
      },
      Clock::time_point::max());
  if (end != End::kTakeFinal) return end;
  // The leader ends the job once every other solver's training is over (or its process died).
  const int n = std::min(g_->solvers.load(), SolverGroup::kMaxSolvers);
  for (int r = 0; r < n; ++r)
    WaitUntil(
        [&] {
          if (g_->stop_requested.load() && !g_->stop.load()) Stop();  // a signal to a process still training
          return g_->finished[r].load() || !Live(r);
        },
        Clock::time_point::max());
  // Across machines: the others' last deltas reach these weights first (the network daemon
  // releases the hold, within its own deadline).
  AwaitDrain();
  return End::kTakeFinal;
}

void SharedGroup::Ended(bool ok) {
  if (!ok) OnFinalFailed();  // before job_done: the others keep their copies then
  g_->job_done.store(1);
  Changed();
}

void SharedGroup::AskLeave() {
  static std::atomic<bool> said{false};
  if (!said.exchange(true))
    LOG_IF(WARNING, log_) << "SIGUSR1 (leave on notice) is for one machine of a job across machines (--peers): ignored";
}

void SolverGroupDeleter::operator()(SolverGroup* g) const { delete g; }
OwnedSolverGroup NewSolverGroup() { return OwnedSolverGroup(new SolverGroup()); }

int64_t SharedGroup::Reached() const { return g_->iter.load(std::memory_order_relaxed); }
void SharedGroup::SetTesting(bool on) { g_->testing.fetch_add(on ? 1 : -1, std::memory_order_relaxed); }
bool SharedGroup::Stopping() const { return g_->stop.load(std::memory_order_relaxed) != 0; }
int64_t SharedGroup::SnapshotRequests() const { return g_->snapshot_requests.load(); }
bool SharedGroup::StoppedEarly() const { return g_->stop.load() || g_->stop_requested.load(); }
int64_t SharedGroup::DoneBy(int rank) const { return g_->done[rank].load(std::memory_order_relaxed); }
bool SharedGroup::FinishedRank(int rank) const { return g_->finished[rank].load() != 0; }
bool SharedGroup::Testing() const { return g_->testing.load(std::memory_order_relaxed) > 0; }
bool SharedGroup::StopRequested() const { return g_->stop_requested.load() != 0; }
bool SharedGroup::JobDone() const { return g_->job_done.load() != 0; }
void SharedGroup::AddOthers(int64_t iterations) { g_->iter.fetch_add(iterations, std::memory_order_relaxed); }
void SharedGroup::TakeGlobalIteration(int64_t iter) { g_->iter.store(iter); }
void SharedGroup::PassSnapshotRequests(int64_t n) { g_->snapshot_requests.fetch_add(n); }
int SharedGroup::JoinRanks(int n) { return g_->solvers.fetch_add(n); }
void SharedGroup::Beat(int first_rank, int n, int64_t now_ms) {
  for (int k = first_rank; k < first_rank + n; ++k) g_->heartbeat_ms[k].store(now_ms);
}
bool SharedGroup::Gone(int rank) const { return g_->gone[rank].load() != 0; }

void SharedGroup::Changed() {
  g_->changes.fetch_add(1);
  FutexWakeAll(g_->changes);  // (other processes too: the word may be in a /dev/shm mapping)
}

bool SharedGroup::WaitUntil(const std::function<bool()>& done, Clock::time_point deadline,
                            std::chrono::milliseconds recheck) const {
  for (;;) {
    const uint32_t seen = g_->changes.load();
    if (done()) return true;
    const Clock::time_point now = Clock::now();
    if (now >= deadline) return false;
    // Returns at once when the word has moved since `seen` (a change this wait may be for).
    FutexWait(g_->changes, seen, std::min<Clock::duration>(recheck, deadline - now));
  }
}

void MachineGroup::AwaitGo() {
  if (!paused()) return;  // (each iteration: no wait set up while the machine is not cut off)
  if (WaitUntil([&] { return !paused() || Stopping(); }, Clock::now() + pause_limit_)) return;
  LOG_IF(ERROR, log_) << "Network: this machine's solvers waited " << pause_limit_.count() / 1000.0
                      << " s for the job's majority and the network daemon neither ended the wait nor gave up: "
                         "stopping";
  Stop();
}

void MachineGroup::SetLeads(bool leads) {
  leads_.store(leads ? 1 : 0);
  Changed();
}

void MachineGroup::SetPaused(bool paused) {
  paused_.store(paused ? 1 : 0);
  Changed();
}

void MachineGroup::HoldFinal() { hold_final_.store(1); }

void MachineGroup::ReleaseFinal() {
  hold_final_.store(0);
  Changed();
}

void MachineGroup::SetFailedElsewhere() { final_failed_.store(1); }

void MachineGroup::AskLeave() {
  leave_asked_.store(1);
  Changed();
}

void MachineGroup::SetLeaving() {
  leaving_.store(1);
  Stop();
}

void MachineGroup::AwaitDrain() {
  if (WaitUntil([&] { return !holding_final(); }, Clock::now() + hold_limit_)) return;
  LOG_IF(WARNING, log_) << "Network: the network daemon held the final snapshot " << hold_limit_.count() / 1000.0
                        << " s without releasing it: taking it with the weights here";
}

}  // namespace hogstream
