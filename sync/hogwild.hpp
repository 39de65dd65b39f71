// Hogwild training: several solvers, one copy of the weights, no locks.
//
// CPU solvers are threads of this process, each with its own Context (seed, data shard), its
// own nets, gradient buffers and solver history, all reading and writing one shared flat
// weight buffer. With `shm`, that buffer and the SolverGroup live in /dev/shm and solver
// processes started in other shells join the same job. With `private_copies`, each solver
// trains its own copy instead and a sync segment streams its deltas to the shared master —
// the path GPU and network solvers take.
//
// The global iteration (the sum over all solvers) drives the lr schedule, display, test and
// snapshot intervals and max_iter; the leader (rank 0, or the lowest live rank if it dies)
// tests, displays and snapshots.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/solver.hpp"
#include "sync/gpu_segment.hpp"
#include "sync/local_segment.hpp"
#include "sync/net_job.hpp"
#include "sync/policy.hpp"
#include "sync/svb.hpp"

namespace hogstream {

// The SOLVERS argument, `[gpu_id:]*cpu_count`: "4" = four CPU solvers, "0:1:2" = GPUs 0 and 1
// plus two CPU solvers.
struct SolverSpec {
  std::vector<int> gpus;
  int cpus = 0;
};
SolverSpec ParseSolverSpec(const std::string& text);

// Where solver `local` of `locals` on machine `machine` of `machines` stands in the job:
// `seed_rank` picks its random stream (unique in the job whatever each machine's solver count:
// machine-major, kMaxGroupSolvers apart), and [begin, begin + length) is the disjoint
// partition of the training data it reads (machine r reads [r/M, (r+1)/M), cut evenly among its
// own solvers), so one epoch reads each record once across the job.
struct SolverPlace {
  int seed_rank;
  double begin, length;
};
SolverPlace PlaceSolver(int machine, int machines, int local, int locals);
// The ranges of training data this solver reads besides its own partition while the machines
// in `dead` (bit r: machine r) are gone: each dead machine's partition cut evenly among the live
// machines in rank order, then among each one's own solvers (so that the job still reads every
// record once a round, whatever each machine's solver count). Empty when none is dead, or when
// this machine is itself among them. Machines beyond 64 are never taken over.
std::vector<std::pair<double, double>> TakenOverPartitions(int machine, int machines, int local, int locals,
                                                           uint64_t dead);

struct HogwildOptions {
  SolverSpec solvers;
  std::string shm;              // join/create /dev/shm job NAME; empty: this process only
  bool private_copies = false;  // each solver its own weights, synced through a segment
  // How the private copies share their progress (sync/policy.hpp); anything but plain async
  // implies private copies.
  Policy policy;
  // --aggregate for private copies (MakeAggregate, sync/aggregate.hpp; not for a job across machines, whose
  // NetJob has its own): from 3 copies up their deltas are weighted min(1, 2/staleness).
  std::string aggregate = "auto";
  size_t chunk_floats = 16384;  // segment chunk size (64 KiB)
  // Private copies: a solver waits for its segment once it has run this many iterations
  // without a completed sweep (its progress unsent, the others' unseen); 0 = never. A bound
  // on staleness in iterations that costs nothing while the daemon keeps up.
  int copy_lead = 4;
  // Private copies: the daemon's sleep between sweeps, in microseconds; -1: 2000 for a CPU
  // solver's copy (the cores are the solvers'), 0 for a GPU solver's host copy (its thread
  // waits on the device; on an H200, two LeNet copies swept 350 times a second at 2000
  // diverged in 2 of 3 runs, and at 1 200 sweeps a second never). A GPU solver's copy on its
  // device (async) has no pause: its segment's daemon turns whenever a chunk can move.
  int sweep_pause_us = -1;
  std::string resume;           // .solverstate to resume from (leader)
  std::string weights;          // comma-separated .caffemodel files to start from
  std::map<std::string, std::vector<int>> input_shapes;
  std::function<SolverAction()> action;
  bool log = true;  // Caffe-format log lines (tests turn them off)
  // The leader's figures at each display and test pass (--metrics, --stats_json); RunHogwild
  // adds this process's segment figures. Null: none.
  std::shared_ptr<StatsSink> stats;
  // Where a job across machines sends this machine's exchange figures, about once a second
  // (--metrics, --stats_json; sync/figures.hpp). Null: none.
  std::shared_ptr<NetworkSink> network;
  // A job across machines (sync/net_job.hpp): this process's solvers train the machine's host
  // copy, which the network daemon links to the other machines'. Borrowed; null: one machine.
  NetJob* net = nullptr;
  // The GPU solvers' device (borrowed; null: the CUDA runtime's, LoadedDeviceApi). Tests pass
  // a fake whose memory the host can address (test/core/fake_device.hpp): each GPU solver then
  // runs its net on the host, in CPU mode, over its copy in that device's memory, and the rest
  // (the GPU segment, the leader's tests and snapshots through it) runs as on a GPU.
  DeviceApi* device = nullptr;
  // Tests: called on solver i's thread after each backward pass, before its update (the net's
  // diffs hold the gradient; a test may put a stand-in there).
  std::function<void(int, Net&)> after_backward;
};

// What this process's solvers did, for callers and tests.
struct HogwildReport {
  bool created = true;           // this process set the job up (vs joined a --shm job)
  int64_t global_iter = 0;       // the group's iteration count at the end
  std::vector<int> ranks;        // of this process's solvers, in the job
  std::vector<int64_t> done;     // iterations each of them ran
  std::vector<uint64_t> seeds;   // the seed of each one's random stream
  std::vector<double> shards;    // where each one's data readers started (fraction)
  std::vector<SegmentStats> segments;  // private copies: each one's segment (gsp: each group's)
  std::vector<GpuSegmentStats> device_segments;  // GPU solvers' copies: each one's GPU segment, in solver order
  PolicyFigures policy;                // waits and rounds the policy made
  SvbFigures svb;                      // --svb: the factor sets made, sent, applied, dropped
  std::vector<float> weights;          // the master (host) weights at the end
};

// bsp and gsp across machines: the share of a round's mean step each of the `mates` machines
// of a synchronous group adds, min(mates, kJobSolverSpeed) / mates, so that the round moves at
// min(mates, kJobSolverSpeed) steps of their mean (the linear scaling of larger batches, up
// to the job speed that holds; the plain mean fell 1.6 to 2 points short at equal global
// iterations: docs/experiments/2026-11-27-bsp-gsp-across-machines.md).
float MachineRoundScale(int mates);

// The seed of rank r's random stream in a job seeded with `base`: rank 0 gets `base` itself
// (so one solver draws what `hogstream train` would), the others distinct streams.
uint64_t SolverSeed(uint64_t base, int rank);

// Trains to max_iter (global); returns when every local solver has finished. An error in any
// solver (a corrupt record, say) stops the job and is rethrown here once the others are done.
HogwildReport RunHogwild(const pb::SolverParameter& param, const HogwildOptions& options);

}  // namespace hogstream
