// Training figures for whoever watches a job (a Prometheus endpoint, a JSON-lines file): what
// the leader solver hands out at each display interval and each test pass, and what each other
// machine's first solver hands out at its display intervals. (A machine's exchange has figures
// of its own, from sync: sync/figures.hpp.)
//
// Not a logger and not a singleton: a program creates its sinks and passes them down through
// SolverOptions / HogwildOptions. Only a reporting solver calls a sink (the leader; across
// machines also each other machine's first live solver, for its own figures), and only at
// display or test time, so the training hot path never touches one. Sinks lock inside themselves.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace hogstream {

// One solver of a group, from the SolverGroup's counters.
struct SolverFigures {
  int rank = 0;
  int64_t iter = 0;         // iterations this solver completed (SolverGroup::done)
  double img_per_s = 0;     // over the last display interval
};

// One private copy's sync segment (sync/local_segment.hpp's SegmentStats, by solver rank).
struct SegmentFigures {
  int rank = 0;
  uint64_t bytes = 0, chunks = 0, dropped = 0, sweeps = 0;
  uint64_t stale = 0;       // stale positions and too-old deltas the segment ignored
  double sweeps_per_s = 0;
};

// At a display interval.
struct TrainFigures {
  int64_t iter = 0;         // the global iteration
  int64_t max_iter = 0;
  double seconds = 0;       // since this run's first iteration
  double img_per_s = 0;     // all solvers together, over the last display interval
  float loss = 0;           // smoothed over average_loss iterations
  float lr = 0;
  int leader = 0;           // the leading solver's rank; -1 when !leads
  bool leads = true;        // false: a machine that does not lead the job, its own solvers
  std::vector<std::pair<std::string, float>> outputs;  // train net outputs, Caffe's order
  std::vector<SolverFigures> solvers;                   // empty for a solver alone
  std::vector<SegmentFigures> segments;                 // private copies only
};

// After a test pass over test net `net`.
struct TestFigures {
  int64_t iter = 0;
  double seconds = 0;
  int net = 0;
  std::vector<std::pair<std::string, float>> outputs;  // mean of each output, Caffe's order
};

class StatsSink {
 public:
  virtual ~StatsSink() = default;
  // `f` may be amended by a sink that adds figures (RunHogwild adds segments).
  virtual void OnTrain(TrainFigures& f) = 0;
  virtual void OnTest(const TestFigures& f) = 0;
};

}  // namespace hogstream
