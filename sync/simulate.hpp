// A job of N machines in virtual time, in one thread: what `hogstream simulate` runs. Each
// machine is the real thing (its own Context, its own solver on its partition of the data,
// its MasterEndpoint for the chunks it owns and its SlaveEndpoint for the rest, the job's
// aggregation rule); only time and the wire are simulated. Machines step when their virtual
// clock says so (a step takes --step_ms times the machine's speed factor, with jitter), their
// daemons sweep every sweep_ms through the job's own SweepPacer, and every frame crosses a
// SimNetwork (transport/sim/endpoint.hpp: bandwidth, latency, loss). Machine 0's copy is
// scored on its test net every `test_every` global iterations.
// Deterministic: one seed, one thread, one BLAS thread per machine: the same curve, bit for bit.
// Not for: measuring the host (no wall-clock time enters), the network's control plane
// (membership, leaders, leave and join are not simulated: every machine lives to the end).
//
// Model (what the virtual clock charges): a step, and nothing else (bsp: also its all-reduce); a delta is answered the
// moment its position arrives, a delta applied the moment it arrives (a daemon that keeps up),
// into the weights a step may have read before (read_at).
// The global iteration is known to every machine exactly (a real job's view lags by a heartbeat).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "sync/figures.hpp"  // kStalenessBuckets
#include "transport/sim/endpoint.hpp"

namespace hogstream {

namespace pb {
class SolverParameter;
}

struct SimulateOptions {
  int machines = 4;
  uint64_t seed = 1;
  double step_ms = 25;         // one machine's iteration, in virtual milliseconds
  double jitter = 0;           // each step's time is step_ms x (1 + U(-jitter, jitter))
  // ... and x exp(d), where each machine's d drifts (an AR(1) walk per step, stationary
  // standard deviation `drift`, correlated over about `drift_steps` of its steps): machines
  // slow and fast for seconds at a time, as cgroup-shared ones are (0: none).
  double drift = 0;
  double drift_steps = 25;
  // Where in its step a machine reads the weights that its gradient is computed on, as a
  // fraction of the step (0: at its start; 1: at its end, the moment it updates). What others
  // send during the step lands in the weights meanwhile and stays under the update, as the
  // daemon's writes land during a real solver's forward and backward passes (Hogwild). 0, the
  // default, is what the namespace runs agree with: at 1 the simulator held rules at 8 machines
  // that diverged there, and its SE at 2 and 4 came out 0.13-0.16 high
  // (docs/experiments/2026-12-06-mid-pass-reads-daemon-bytes.md).
  double read_at = 0;
  int stragglers = 0;          // the last `stragglers` machines are slower ...
  double straggler_factor = 2; // ... by this factor
  SimLinkOptions link;
  uint32_t sweep_ms = 20;      // as NetJobOptions: a master sweeps at most once per sweep_ms
  uint32_t sweeps_per_iter = 0;
  uint32_t chunk_floats = 0;   // 0: as many as one message carries
  std::string aggregate;       // --aggregate's text ("" = auto)
  std::function<uint64_t()> epoch;  // global iterations per epoch of the data (AggregateSetting::epoch)
  int64_t max_iter = 0;        // global iterations at most (0: the solver's max_iter)
  int64_t test_every = 100;    // global iterations between scores of machine 0's copy
  std::string score = "accuracy";  // the test net output to score
  std::vector<double> targets;     // scores to report the crossing of; the run stops past the last
  bool log = false;                // the engine's own log lines
  // The synchronous reference instead of the asynchronous job: each step, the N machines'
  // batches make one of N x the solver's TRAIN batch (synchronous data-parallel SGD, the
  // gradients averaged: one solver with that batch), base_lr times `bsp_lr` (linear scaling:
  // N; also sqrt(N), N/2), warmed up linearly from base_lr over `bsp_warmup` global
  // iterations. A step counts N global iterations (samples / batch, as the job's) and takes the
  // slowest machine's step time plus a ring all-reduce of the gradient over the links.
  bool bsp = false;
  double bsp_lr = 1;
  int64_t bsp_warmup = 0;
};

struct SimulateResult {
  int machines = 0;
  std::string rule;  // the aggregation rule's line
  struct Point {
    int64_t iter;
    double virtual_s, score;
  };
  std::vector<Point> curve;
  // Per target: the global iteration and virtual time of its first crossing, interpolated
  // between the two scores around it (-1 / 0: not reached).
  struct Crossing {
    double target, iter = -1, virtual_s = 0;
  };
  std::vector<Crossing> crossings;
  // Why the job ended before max_iter and its targets (a machine's loss went non-finite, say:
  // the solver's one line); empty: it did not.
  std::string ended_early;
  int64_t iterations = 0;   // global iterations run
  double virtual_s = 0;     // virtual time at the end
  uint64_t bytes = 0, lost = 0;
  uint64_t deltas_applied = 0, deltas_refused = 0;
  uint64_t staleness[kStalenessBuckets] = {};  // deltas applied per bucket of kStalenessBounds (in global iterations)
  uint64_t weights_hash = 0;  // XXH3 of machine 0's final weights (the determinism check)
  std::vector<std::string> solver_lines;  // what the rule changed in the solvers' settings
};

// Runs one simulated job; `progress` (may be empty) receives one line per score.
// Errors (a bad setting, the solver's) are thrown as hogstream's Error.
SimulateResult Simulate(const pb::SolverParameter& solver, const SimulateOptions& opt,
                        const std::function<void(const std::string&)>& progress = {});

}  // namespace hogstream
