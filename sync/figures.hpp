// A machine's exchange in figures: what its network daemon hands out about once a second (the
// job's machines as it sees them, its traffic, the staleness of what it applied, the sharing
// policy's waits), and the interface that takes them (NetworkSink). Sync's own: a new figure
// here recompiles sync and whoever watches (observe/), not the engine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace hogstream {

// The upper bounds of the staleness histogram's buckets, in global iterations (a last bucket
// takes the rest): a delta applied `age` iterations after the position its progress began at.
inline constexpr uint64_t kStalenessBounds[] = {1, 2, 4, 8, 16, 32, 64, 128};
inline constexpr size_t kStalenessBuckets = sizeof(kStalenessBounds) / sizeof(kStalenessBounds[0]) + 1;

// What a sharing policy made a process's solvers do (sync/policy.hpp's PolicyRun): for the
// display line, the run's report and a machine's network figures.
struct PolicyFigures {
  uint64_t waits = 0;        // times a solver found it had to wait
  double wait_seconds = 0;   // summed over solvers
  uint64_t rounds = 0;       // bsp / gsp rounds, easgd exchanges
  uint64_t unsound = 0;      // bsp / gsp: steps left out of a round for a non-finite element
};

// One machine of a job as this machine sees it.
struct PeerNetFigures {
  int rank = 0;
  std::string name;                        // as the peer list names it
  bool self = false, live = false, ready = false, leader = false;
  bool straggler = false;                  // its rate lags the job's median (NetJobOptions::straggler)
  bool left = false;                       // it left the job on notice (not live, and not dead)
  int64_t iterations = 0;                  // its solvers' iterations (this incarnation)
  double iter_per_s = 0;                   // over the last second
  // Its deltas to the chunks this machine masters (none for itself):
  uint64_t deltas_applied = 0;
  uint64_t refused = 0;                    // refused by value: non-finite, or absurd (SegmentRule::absurd)
  uint64_t staleness_sum = 0;              // global iterations, over deltas_applied
  uint64_t staleness[kStalenessBuckets] = {};  // deltas per bucket of kStalenessBounds (not cumulative)
  // Its traffic with this machine, as the transport tells senders apart (by the wire's source:
  // address, MAC or queue pair; never what a frame claims). None for itself.
  uint64_t bytes_in = 0;                   // payload received from it
  uint64_t bytes_out = 0;                  // payload sent to it alone (a multicast send counts for no peer)
  double gbit_in = 0, gbit_out = 0;        // the same, over the last second
  uint64_t frames_lost = 0;                // to it alone, dropped on the way (injected); from it, corrupt (bad checksum)
  uint64_t frames_foreign = 0;             // from its address: another job's, or claiming another sender
  uint64_t frames_bad_mac = 0;             // from its address, whose MAC failed (another key, or a forgery)
  uint64_t frames_malformed = 0;           // from its address: no frame of ours (short, bad length or header)
};

// A machine's exchange, from its own daemon, about once a second (counters since its start).
struct NetworkFigures {
  int machine = 0;                         // this machine's rank
  int leader = 0;                          // the machine that leads the job
  int64_t global_iter = 0;
  bool quorum = true;                      // this machine reaches a majority of the job
  uint32_t owned = 0, chunks = 0;          // chunks this machine masters, of all
  double sweeps_per_s = 0;                 // per destination (a machine, or the group)
  double gbit_out = 0, gbit_in = 0;        // payload, over the last second
  uint64_t bytes_sent = 0, bytes_received = 0;  // payload
  uint64_t messages_sent = 0;
  uint64_t sweeps = 0;                     // of this machine's masters (all destinations)
  uint64_t positions_sent = 0, deltas_applied = 0, positions_answered = 0;
  uint64_t unanswered = 0;                 // positions whose delta did not come in time
  uint64_t lost = 0;                       // frames dropped on the way (injected) or refused as corrupt
  uint64_t foreign = 0;                    // frames of another job, or from an address not in the job
  uint64_t refused_mac = 0;                // frames whose MAC failed (another --job-key, or a forgery)
  uint64_t refused_value = 0;              // deltas and positions refused by value (non-finite, absurd)
  uint64_t malformed = 0;                  // datagrams that are no frame of ours, or no sync message
  uint64_t kernel_dropped = 0;             // datagrams the kernel dropped before this machine read them
  uint64_t control_refused = 0;            // control messages refused (all reasons)
  // Positions and deltas dropped as not current: duplicates, answers too late or to an earlier
  // master, positions overtaken or of an earlier master, from a machine that does not own the
  // chunk, or not of the codec (ordinary in small numbers; replays of another run show here)
  uint64_t stale = 0;
  uint64_t reshares = 0;                   // ownership changes
  uint64_t recoveries = 0;                 // times this machine re-took the weights after its copy went non-finite
  double weight = 0;                       // mean weight of the deltas applied (SegmentRule)
  double staleness = 0;                    // mean, global iterations
  uint64_t staleness_max = 0;
  uint64_t svb_bytes_sent = 0;             // --svb: factor bytes sent
  double median_iter_per_s = 0;            // of the machines training (the stragglers' yardstick)
  std::string policy;                      // the sharing policy that gates or rounds this machine's solvers (empty: none)
  PolicyFigures policy_figures;            // ... and what it made them do (counters since the start)
  std::string aggregation;                 // how this machine's masters take the others' deltas (the rule's Line)
  std::vector<PeerNetFigures> peers;       // every machine of the job, by rank
};

// The bucket of kStalenessBounds that holds `age`.
inline size_t StalenessBucket(uint64_t age) {
  size_t b = 0;
  while (b + 1 < kStalenessBuckets && age > kStalenessBounds[b]) ++b;
  return b;
}

// Where a machine's exchange figures go (--metrics, --stats_json): called from its network
// daemon's thread, about once a second. Sinks lock inside themselves.
class NetworkSink {
 public:
  virtual ~NetworkSink() = default;
  virtual void OnNetwork(const NetworkFigures& f) = 0;
};

}  // namespace hogstream
