// The layout of a Hogwild group's counters (sync/group.hpp's SolverGroup): private to the
// group's own code (sync/group.cpp) and to the /dev/shm region that lays it out in its header
// (sync/shm_region.cpp); tests include it to stand in for solvers. Everything else goes
// through SharedGroup's named operations (scripts/check_layers.sh holds to that).
#pragma once

#include <atomic>
#include <cstdint>

#include "sync/group.hpp"

namespace hogstream {

// The state Hogwild solvers share: the global iteration counter (the sum of every solver's
// iterations), a stop flag, the leader's rank, requests any process may post for the leader,
// and per-solver progress. Lives in ordinary memory for threads or in a /dev/shm mapping for
// processes, so only lock-free atomics, no pointers; a reader range-checks any rank it reads
// before indexing with it. Any solver thread may touch any field; a writer of stop, leader,
// stop_requested, job_done or finished[] calls SharedGroup::Changed after it.
struct SolverGroup {
  static constexpr int kMaxSolvers = kMaxGroupSolvers;
  std::atomic<int64_t> iter{0};    // next global iteration to claim; never passes max_iter
  std::atomic<int32_t> stop{0};    // 1: everyone finishes the current iteration and returns
  std::atomic<int32_t> leader{0};  // rank that tests, displays and snapshots
  std::atomic<int32_t> solvers{0}; // ranks handed out so far
  std::atomic<int32_t> job_done{0};  // 1: the leader finished the job (final test, snapshot)
  std::atomic<int32_t> testing{0};   // solvers in a test pass now (Group::SetTesting)
  // Requests from any process of the job (a signal it received), acted on by the leader:
  // a snapshot each time the counter moves; stop = snapshot, then stop the whole job.
  std::atomic<int64_t> snapshot_requests{0};
  std::atomic<int32_t> stop_requested{0};
  // The futex word the group's waits sleep on: moved, and its sleepers woken, by Changed.
  std::atomic<uint32_t> changes{0};
  std::atomic<int64_t> done[kMaxSolvers] = {};       // iterations each rank completed
  // CLOCK_MONOTONIC ms, ticked every 100 ms by each process for its ranks while they run
  // (alive, not necessarily progressing); 0 = not started. Stale for 2 s = dead.
  std::atomic<int64_t> heartbeat_ms[kMaxSolvers] = {};
  std::atomic<int32_t> finished[kMaxSolvers] = {};   // 1: the rank's training is over
  // 1: the rank left on an error; though its process may still beat, it never acts again
  // (so a leader that failed is replaced at once).
  std::atomic<int32_t> gone[kMaxSolvers] = {};
};
static_assert(std::atomic<int64_t>::is_always_lock_free, "shared counters must be lock-free");

}  // namespace hogstream
