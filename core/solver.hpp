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

struct SolverOptions {
  // Stand-in shapes for Data layers without a source (see NetOptions::input_shapes).
  std::map<std::string, std::vector<int>> input_shapes;
  // Polled once per iteration.
  std::function<SolverAction()> action;
  // Log lines (Caffe's format through glog); off for tests that only want numbers.
  bool log = true;
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
  void Display(float loss, std::chrono::steady_clock::time_point& last, int& last_iter);
  int BatchSize() const;

  std::vector<float> losses_;
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
