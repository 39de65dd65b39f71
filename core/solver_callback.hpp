// SolverCallback: the engine's one seam to whatever a solver trains within — a sharing policy,
// a private copy's segment, --svb, a job across machines. A solver calls its callbacks, in the
// order they were added, at fixed points of its loop; each method's default means "nothing to
// do here", so a callback overrides only what it takes part in, and a solver alone has none.
// Every method runs on the solver's own thread.
#pragma once

#include <functional>
#include <string>

namespace hogstream {

class Net;

class SolverCallback {
 public:
  virtual ~SolverCallback() = default;
  // Before an iteration is claimed; may wait (a policy's clock bound). false: stop training now
  // (the job is stopping); the callbacks after it are not asked.
  virtual bool BeforeIteration() { return true; }
  // After the iteration's backward, before the update: the gradient is in the net's diffs and
  // may be added to (--svb folds in the other solvers' gradients).
  virtual void AfterBackward(Net& /*net*/) {}
  // After each update (a synchronous round, a periodic exchange).
  virtual void AfterIteration() {}
  // The iteration's loss is not finite: this solver's weights are lost. true: this callback
  // restored them (a private copy re-took the shared weights, a job across machines re-took
  // them from the others), so the step is skipped and training goes on; false: not restored,
  // with a reason in `why` where there is one. The callbacks are asked in turn until one
  // restores; where none does, the solver ends with one line.
  virtual bool Diverged(std::string* /*why*/) { return false; }
  // Once after the solver's last iteration, before it counts as finished (a private copy hands
  // its last deltas to the master here, so the final snapshot holds them).
  virtual void TrainEnd() {}
  // The leader's tests and snapshots on the job's master weights where the nets cannot view
  // them in place (a GPU solver's copy on its device): runs f with the master's values in the
  // solver's own copy, puts the copy back after, and returns true; false: not this callback's
  // to do (the solver then views SolverOptions::master_weights, or its own weights).
  virtual bool OnMaster(const std::function<void()>& /*f*/) { return false; }
  // The leader's display, after its own lines, where it logs: what the solver trains within
  // logs its own figures here (the exchange's, a segment's, a policy's), each from its own
  // records; the engine carries none of their text.
  virtual void OnDisplay() {}
};

}  // namespace hogstream
