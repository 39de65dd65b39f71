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
#include <filesystem>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/group.hpp"
#include "core/net.hpp"
#include "core/solver_callback.hpp"
#include "core/stats.hpp"

namespace hogstream {

struct DeviceUpdate;  // core/gpu_engine.hpp

struct SolverOptions {
  // Stand-in shapes for Data layers without a source (see NetOptions::input_shapes).
  std::map<std::string, std::vector<int>> input_shapes;
  // Polled once per iteration.
  std::function<SolverAction()> action;
  // Log lines (Caffe's format through glog); off for tests that only want numbers.
  bool log = true;
  // Hogwild: the group this solver trains in and its rank there (null: a solver alone).
  Group* group = nullptr;
  int rank = 0;
  // GPU mode: SGD updates the weights on the device (the host copy is refreshed only when read
  // through the blobs: snapshots, tests). Off where something reads the flat host buffer every
  // iteration (a private copy's segment): the update is then made on the host and uploaded.
  bool device_update = true;
  // Seed the thread's Context with random_seed (when >= 0). Hogwild runners seed each
  // solver's Context themselves, distinctly, and turn this off.
  bool reseed = true;
  // Private copies: the job's master weights (same layout as the net's flat buffer). The
  // leader tests and snapshots these, not its own copy.
  const float* master_weights = nullptr;
  // What the solver tells and asks of whatever it trains within, in this order
  // (core/solver_callback.hpp; not owned: each must outlive Solve). Solver::AddCallback adds
  // one after construction.
  std::vector<SolverCallback*> callbacks;
  // Where the leader sends its figures at each display interval and test pass (--metrics,
  // --stats_json); null: nowhere.
  std::shared_ptr<StatsSink> stats;
  // > 0: a NormGuard of this factor on every iteration's gradient (after clip_gradients). A
  // job across machines whose solvers run at several times the recipe's rate sets it
  // (docs/experiments/2026-11-28-runaway-norm-guard.md); 0: off, as in Caffe.
  double norm_guard = 0;
  // Multiplies the lr policy's rate at each iteration (a synchronous job's linear-scaling warm-up,
  // sync/simulate.cpp); unset: 1, as in Caffe.
  std::function<double(int64_t iter)> lr_factor;
};

// Adaptive clipping: a gradient whose L2 norm exceeds `factor` times the running mean of the
// recent norms is scaled down to that bound. The mean is an exponential average (weight 1 -
// decay per step) of the norms as applied (clipped), seeded by the plain mean of the first
// `warmup`, during which nothing is clipped; so a runaway whose gradients grow geometrically
// is held to a growth of at most 1 + (factor - 1)(1 - decay) per step, while the ordinary
// spread of the norms (within about twice their mean for a minibatch) passes untouched. A
// non-finite norm is left to the divergence handling and does not enter the mean.
// A guard that meets `give_up` gradients in a row beyond its bound is not holding a spike but
// a runaway it cannot stop: it lets go (clips nothing more until Reset), so that the run
// diverges as it would have without it and the divergence handling ends or restores it,
// rather than training on weights held just short of non-finite (a net gone dead: chance
// accuracy).
class NormGuard {
 public:
  explicit NormGuard(double factor, int warmup = 20, double decay = 0.95, int give_up = 10)
      : factor_(factor), warmup_(warmup), decay_(decay), give_up_(give_up) {}
  // The scale for a gradient of this norm (1: untouched), and the norm joins the mean.
  double Scale(double norm);
  // Armed afresh, as new (the weights were restored): the counts of clips and let-gos stay.
  void Reset();
  double mean() const { return mean_; }
  uint64_t steps() const { return steps_; }   // gradients seen since construction
  uint64_t clipped() const { return clipped_; }
  bool let_go() const { return let_go_; }   // now, until Reset
  uint64_t let_gos() const { return let_gos_; }
  int give_up() const { return give_up_; }

 private:
  double factor_, mean_ = 0;
  int warmup_;
  double decay_;
  int give_up_, in_a_row_ = 0;
  bool let_go_ = false;
  uint64_t steps_ = 0, seen_ = 0, clipped_ = 0, let_gos_ = 0;
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
  void JoinGroup(Group* group, int rank) {
    options_.group = group;
    options_.rank = rank;
    group_ = group ? group : &lone_;
  }
  // One more callback, after those it has (see SolverOptions::callbacks): set after
  // construction, like JoinGroup; not owned.
  void AddCallback(SolverCallback* callback) { options_.callbacks.push_back(callback); }
  // Private copies: the job's master weights, which the leader tests and snapshots (see
  // SolverOptions::master_weights): set after construction, like JoinGroup.
  void UseMaster(const float* master) { options_.master_weights = master; }

  // Trains to max_iter (resuming from a .solverstate when given), then snapshots and tests
  // as Caffe does. In a group, max_iter bounds the global iteration.
  void Solve(const std::string& resume_file = "");
  // Runs `iters` iterations (forward/backward iter_size times, update, snapshot checks); in a
  // group, until the global iteration has grown by `iters` (or reached max_iter).
  void Step(int iters);
  // Loads weights and solver history from a .solverstate (and the .caffemodel it names).
  void Restore(const std::string& state_file);
  // Writes <prefix>_iter_<N>.caffemodel and .solverstate (N = iter(), or `at` when >= 0);
  // returns the model path. With master weights (private copies) it saves those.
  std::string Snapshot(int64_t at = -1);
  // The final snapshot: when it cannot be written (the directory went away, a full disk), the
  // weights and state go to $TMPDIR (or /tmp) under the prefix's file name instead, and the
  // job ends with one line naming both places (the Error), so that nothing trained is lost.
  void FinalSnapshot();
  // Writes the weights and state to $TMPDIR (or /tmp) as <prefix name>_rescued<tag>_iter_N;
  // returns the model path (throws where that cannot be written either).
  std::string Rescue(const std::string& tag);
  // A machine that does not lead, when the leader's final snapshot failed (Group::End::
  // kKeepCopy): its own copy is rescued too, and the job ends here with one line.
  [[noreturn]] void KeepWeightsAfterTheLeadersFailure();
  // A snapshot during training: a failure (an unwritable directory, a full disk) is logged
  // once and training goes on (the next snapshot tries again); a periodic file another
  // leader of the job already wrote is not overwritten.
  void TrySnapshot(int64_t at);
  // `model` exists and was written during this run by another leader of the job.
  bool WrittenByAnotherLeader(const std::string& model) const;
  std::string SnapshotBase(int64_t iter) const;  // <prefix>_iter_<iter>
  std::string rescue_prefix_;  // non-empty: SnapshotBase uses it instead of snapshot_prefix
  // Errors that would otherwise surface only at the first snapshot, after the training: an
  // unwritable snapshot directory, snapshot_format HDF5. Solve calls it first.
  void CheckSnapshotSettings() const;
  // Runs every test net for its test_iter batches; returns the mean of each output value.
  std::vector<std::vector<float>> TestAll();

  float GetLearningRate() const;
  double PolicyRate() const;  // the lr policy's rate alone (GetLearningRate: times lr_factor)
  int iter() const { return iter_; }
  Net& net() { return *net_; }
  const std::vector<std::unique_ptr<Net>>& test_nets() const { return test_nets_; }
  const pb::SolverParameter& param() const { return param_; }
  float smoothed_loss() const { return smoothed_loss_; }
  const std::vector<std::shared_ptr<Blob>>& history() const { return history_; }
  // Zeroes the update history (momentum and the like): the trajectory it carried is lost.
  void ForgetHistory();
  bool stopped_early() const { return stopped_early_; }
  // The norm guard's figures (SolverOptions::norm_guard; null when off).
  const NormGuard* norm_guard() const { return guard_.get(); }

 protected:
  // Turns the accumulated gradient of learnable param `id` into the step to subtract,
  // in place in its diff. `rate` is the policy's current learning rate.
  virtual void ComputeUpdateValue(int id, float rate) = 0;
  // GPU mode: whether this rule has a device pass (without one the update is made on the host
  // and uploaded with the next pass), and that pass: the whole update of param `id`
  // (iter_size normalisation, weight decay, the rule, w -= step) on the device. Gradient
  // clipping and the norm guard then scale the gradients on the device first.
  virtual bool HasDeviceUpdate() const { return false; }
  virtual void UpdateOnDevice(int id, float rate) {}
  // The device pass of param `id` under rule `u` (its rule, lr and rule settings set by the
  // caller; the iter_size scale, the blob's weight decay and the regularisation filled here),
  // over its data, diff and history (a second history blob where the rule keeps two).
  void RunDeviceUpdate(int id, const DeviceUpdate& u);
  void ApplyUpdate();

  pb::SolverParameter param_;
  SolverOptions options_;
  int iter_ = 0;
  // The group it trains in: options_.group, or itself alone (a null object: the solver never
  // asks whether it has a group).
  LoneGroup lone_{&iter_, &options_.log};
  Group* group_ = &lone_;
  int current_step_ = 0;
  int64_t next_test_ = 0, next_display_ = 0, next_snapshot_ = 0;
  std::unique_ptr<Net> net_;
  std::vector<std::unique_ptr<Net>> test_nets_;
  // history_[k * P + id] for k < history_per_param, P = learnable params.
  std::vector<std::shared_ptr<Blob>> history_;
  std::vector<float> scratch_;  // per-update temporary, sized to the largest param
  std::unique_ptr<NormGuard> guard_;  // SolverOptions::norm_guard
  bool device_norms_ = false;         // GradientNorm / ScaleGradient on the device (a device update)

 private:
  void InitNets();
  void Regularize(int id);
  void ClipGradients();
  void GuardNorm();
  double GradientNorm();           // the L2 norm of every learnable param's diff together
  void ScaleGradient(float s);     // every learnable param's diff times s
  void UpdateSmoothedLoss(float loss);
  // The display interval's lines (`lead`) and figures for the stats sink (lead or reports()).
  void Display(std::chrono::steady_clock::time_point& last, int& last_iter, bool lead);
  int BatchSize() const;
  // Whether this solver tests, displays and snapshots (always, alone; the leader, in a group).
  bool leader() const;
  // Whether it hands display figures to the stats sink: the leader, and across machines each
  // other machine's reporting solver too (Group::Reports).
  bool reports() const;
  // Claims the next iteration: the solver's own counter alone, the group's counter in a group
  // (returns >= stop_iter, claiming nothing, once it is reached).
  int64_t Claim(int64_t stop_iter);
  // True once when `it` has reached `*next`, a multiple of `interval`; moves `*next` on.
  static bool Due(int64_t it, int interval, int64_t* next);
  // Runs iterations until the iteration count (the group's, in a group) reaches stop_iter.
  void StepTo(int64_t stop_iter);
  // StepTo's parts: the counters and schedules of a new run of steps; the first multiple of
  // `interval` at or (include_now false) past iter_; the periodic snapshots the count has
  // reached (at most last_periodic); one claimed iteration `it` (test pass and display where
  // due, forward/backward, update; a non-finite loss restored or one line).
  void StartSteps();
  int64_t FirstMultiple(int interval, bool include_now) const;
  void SnapshotMultiples(int64_t last_periodic);
  void TrainIteration(int64_t it, bool lead, std::chrono::steady_clock::time_point& last, int& last_iter);
  // The signal-driven request for this iteration, after group-wide forwarding: what this
  // solver must act on (always NONE for a follower in a group).
  SolverAction PollAction();
  // Points the nets' learnable params at `weights` (a flat buffer of this net's layout), or
  // back at the net's own buffer when null; for the leader's tests and snapshots of a master.
  void ViewWeights(const float* weights);
  // Runs f with the nets viewing the master weights when there are any (private copies; a
  // device copy through its callback's OnMaster).
  void OnMaster(const std::function<void()>& f);
  // Every callback's BeforeIteration, in order, until one says stop (false).
  bool BeforeIteration();
  std::vector<ptrdiff_t> view_offsets_;  // learnable params' offsets in the flat buffer

  std::vector<float> losses_;
  int64_t losses_seen_ = 0;  // losses since the last Step began (the smoothing window's clock)
  int64_t snapshot_requests_seen_ = 0;
  int64_t last_snapshot_iter_ = -1;
  std::set<std::string> written_;  // model files this solver wrote
  std::filesystem::file_time_type solve_started_;
  int snapshot_failures_ = 0;      // in a row
  std::vector<int64_t> solver_done_;  // per-rank iterations at the last display
  float smoothed_loss_ = 0;
  bool stopped_early_ = false;
  std::chrono::steady_clock::time_point start_time_;
  int start_iter_ = 0;
  int64_t led_from_ = -1;     // the global iteration at which this solver last began to lead
  bool was_leading_ = false;  // whether it led at its previous iteration
};

// Makes the solver named by param.type() (or the legacy solver_type); Error for unknown.
std::unique_ptr<Solver> CreateSolver(const pb::SolverParameter& param,
                                     const SolverOptions& options = {});

}  // namespace hogstream
