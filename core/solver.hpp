// Solver: trains a Net with Caffe's semantics — the learning-rate policies, iter_size
// accumulation, weight decay (L2/L1), gradient clipping, periodic testing, display with
// average_loss, and snapshots (.caffemodel + .solverstate, binary protobuf Caffe reads)
// written atomically. Subclasses implement one update rule each (core/solvers/).
//
// The update runs over the net's learnable params, which live in one flat buffer; solver
// history blobs are private to the solver. One thread drives a Solver.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/net.hpp"

namespace hogstream {

// What a caller (signal handler, supervisor) asks the solver to do between iterations.
enum class SolverAction { NONE, STOP, SNAPSHOT };

// The state Hogwild solvers share: the global iteration counter (the sum of every solver's
// iterations, on which the lr schedule, display, test and snapshot intervals run), a stop
// flag, the leader's rank (the one solver that tests, displays and snapshots) and per-solver
// progress. Lives in ordinary memory for threads or in a /dev/shm mapping for processes, so
// only lock-free atomics, no pointers. Any solver thread may touch any field.
struct SolverGroup {
  static constexpr int kMaxSolvers = 256;
  std::atomic<int64_t> iter{0};    // next global iteration to claim
  std::atomic<int32_t> stop{0};    // 1: everyone finishes the current iteration and returns
  std::atomic<int32_t> leader{0};  // rank that tests, displays and snapshots
  std::atomic<int32_t> solvers{0}; // ranks handed out so far
  std::atomic<int32_t> job_done{0};  // 1: the leader finished the job (final test, snapshot)
  std::atomic<int64_t> done[kMaxSolvers] = {};       // iterations each rank completed
  // CLOCK_MONOTONIC ms, ticked every 100 ms by each process for its ranks while they run
  // (alive, not necessarily progressing); 0 = not started. Stale for 2 s = dead.
  std::atomic<int64_t> heartbeat_ms[kMaxSolvers] = {};
  std::atomic<int32_t> finished[kMaxSolvers] = {};   // 1: the rank's training is over
};

// Milliseconds on the clock SolverGroup heartbeats use (comparable across processes).
int64_t HeartbeatNowMs();
constexpr int64_t kHeartbeatStaleMs = 2000;
static_assert(std::atomic<int64_t>::is_always_lock_free, "shared counters must be lock-free");

struct SolverOptions {
  // Stand-in shapes for Data layers without a source (see NetOptions::input_shapes).
  std::map<std::string, std::vector<int>> input_shapes;
  // Polled once per iteration.
  std::function<SolverAction()> action;
  // Log lines (Caffe's format through glog); off for tests that only want numbers.
  bool log = true;
  // Hogwild: the group this solver trains in and its rank there (null: a solver alone).
  SolverGroup* group = nullptr;
  int rank = 0;
  // Extra lines for the leader's display (per-segment statistics, say).
  std::function<std::string()> extra_stats;
};

class Solver {
 public:
  // `history_per_param`: history blobs the update rule keeps per learnable param.
  Solver(const pb::SolverParameter& param, const SolverOptions& options = {},
         int history_per_param = 1);
  virtual ~Solver();
  Solver(const Solver&) = delete;
  Solver& operator=(const Solver&) = delete;

  virtual const char* type() const = 0;

  // Makes this solver one of a Hogwild group (after construction: its nets exist by then).
  void JoinGroup(SolverGroup* group, int rank, std::function<std::string()> extra_stats = {}) {
    options_.group = group;
    options_.rank = rank;
    options_.extra_stats = std::move(extra_stats);
  }

  // Trains to max_iter (resuming from a .solverstate when given), then snapshots and tests
  // as Caffe does.
  void Solve(const std::string& resume_file = "");
  // Runs `iters` iterations (forward/backward iter_size times, update, snapshot checks).
  void Step(int iters);
  // Loads weights and solver history from a .solverstate (and the .caffemodel it names).
  void Restore(const std::string& state_file);
  // Writes <prefix>_iter_<N>.caffemodel and .solverstate; returns the model path.
  std::string Snapshot();
  // Runs every test net for its test_iter batches; returns the mean of each output value.
  std::vector<std::vector<float>> TestAll();

  float GetLearningRate() const;
  int iter() const { return iter_; }
  Net& net() { return *net_; }
  const std::vector<std::unique_ptr<Net>>& test_nets() const { return test_nets_; }
  const pb::SolverParameter& param() const { return param_; }
  float smoothed_loss() const { return smoothed_loss_; }
  const std::vector<std::shared_ptr<Blob>>& history() const { return history_; }
  bool stopped_early() const { return stopped_early_; }

 protected:
  // Turns the accumulated gradient of learnable param `id` into the step to subtract,
  // in place in its diff. `rate` is the policy's current learning rate.
  virtual void ComputeUpdateValue(int id, float rate) = 0;
  void ApplyUpdate();

  pb::SolverParameter param_;
  SolverOptions options_;
  int iter_ = 0;
  int current_step_ = 0;
  int64_t next_test_ = 0, next_display_ = 0, next_snapshot_ = 0;
  std::unique_ptr<Net> net_;
  std::vector<std::unique_ptr<Net>> test_nets_;
  // history_[k * P + id] for k < history_per_param, P = learnable params.
  std::vector<std::shared_ptr<Blob>> history_;
  std::vector<float> scratch_;  // per-update temporary, sized to the largest param

 private:
  void InitNets();
  void Regularize(int id);
  void ClipGradients();
  void UpdateSmoothedLoss(float loss, int start_iter);
  void Display(std::chrono::steady_clock::time_point& last, int& last_iter);
  int BatchSize() const;
  // Whether this solver tests, displays and snapshots (always, alone; the leader, in a group).
  bool leader() const;
  // Claims the next iteration: the solver's own counter alone, the group's counter in a group.
  int64_t Claim();
  // True once when `it` has reached `*next`, a multiple of `interval`; moves `*next` on.
  static bool Due(int64_t it, int interval, int64_t* next);
  void TakeOverIfLeaderGone();

  std::vector<float> losses_;
  std::vector<int64_t> solver_done_;  // per-rank iterations at the last display
  float smoothed_loss_ = 0;
  bool stopped_early_ = false;
  std::chrono::steady_clock::time_point start_time_;
  int start_iter_ = 0;
};

// Makes the solver named by param.type() (or the legacy solver_type); Error for unknown.
std::unique_ptr<Solver> CreateSolver(const pb::SolverParameter& param,
                                     const SolverOptions& options = {});

// Installs SIGINT/SIGHUP handlers whose effect ("stop", "snapshot" or "none") a Solver polls
// through the returned action function. Process-wide by nature (signals are).
std::function<SolverAction()> InstallSignalActions(const std::string& sigint_effect,
                                                   const std::string& sighup_effect);

}  // namespace hogstream
