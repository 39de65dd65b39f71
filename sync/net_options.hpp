// The settings of one machine's part of a job across machines (sync/net_job.hpp): its rank
// and the job's machines, the daemon's pacing, liveness and quorum times, the segments' rule,
// the agreement hashes, shares and stragglers; and their checks, each mistake one line.
// Not for: what the settings mean at run time (the rooms of sync/net_job.hpp), the command
// line (bin/program.cpp fills them from flags).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sync/net_control.hpp"
#include "sync/segment.hpp"

namespace hogstream {

struct NetJobOptions {
  int rank = 0;                    // this machine's index in the job's list
  int machines = 1;
  std::vector<std::string> names;  // per rank, for messages (e.g. "udp://10.0.0.2:7000"); may be empty
  bool multicast = false;          // positions to Dest::Group(0) (one send reaches every machine)
  uint32_t chunk_floats = 0;       // 0: as many as one message carries (a multiple of 4)
  bool chunk_at_params = false;    // no chunk straddles two parameter blobs (Attach's `params`)
  uint32_t heartbeat_ms = 20;      // control message to every machine at least this often
  uint32_t dead_ms = 2000;         // silence after which a machine is dead
  uint32_t start_ms = 60000;       // how long to wait for every machine at the start
  uint32_t sweep_ms = 20;          // a master sweeps its chunks at most once per sweep_ms
  uint32_t sweeps_per_iter = 0;    // ... and at most this often per local iteration (0: no limit)
  uint32_t window = 64;            // positions awaiting their delta, per destination
  uint32_t drain_ms = 5000;        // the leader's longest wait for the others' last deltas
  // Codec, weed-out and aggregation of every segment (--compress, --policy=weedout:N,
  // --aggregate: rule.aggregate, sync/aggregate.hpp); its update counts are made per job (every
  // master endpoint of this machine shares them).
  SegmentRule rule;
  bool track_fresh = false;        // keep fresh_rounds() up to date (ssp, bsp, gsp across machines)
  // bsp / gsp (Policy::MachineGroups): each machine's synchronous group, per rank. Then
  // slowest_other() is over the machines of this one's group only, by their iterations whose
  // progress has gone out, and a delta's staleness counts from its group's last one.
  std::vector<int> machine_group;
  // Agreement (Agree): hashes every machine must share; 0 = not checked (kAgreeNet defaults to
  // the buffer's length and parameter offsets given to Attach).
  uint64_t agree[kAgreeKinds] = {};
  // Quorum: a machine that reaches fewer than half of the job (counting itself; exactly half
  // only with rank 0 among them) does not lead, test or snapshot; cut off that long, it ends
  // with one line (0: 30 x dead_ms).
  uint32_t quorum_ms = 0;
  // Stragglers: a machine still training whose iteration rate stays below this fraction of
  // the median of the machines training, kStragglerSeconds rate windows in a row, is named
  // (the leader's log once, every machine's figures while it lags); 0: never.
  double straggler = 0.5;
  // Chunk shares in proportion to these weights, by rank (--share_weights: a machine of less
  // capacity masters fewer chunks; beyond the list, 1; empty: equal shares). Agreed.
  std::vector<double> share_weights;
  // The machines the job's settings are made for (ShareMomentum, easgd's speed): a new
  // machine's are the others' (one fewer than its list); 0: `machines`.
  int job_machines = 0;
  bool admit = false;               // admit a new machine (another's --join) where the transport can (bin: with a job key)
  bool log = true;
};

// `opt` checked (a mistake is one Error line: a rank outside the job, multicast on a transport
// that cannot, a dead-machine timeout within two heartbeats, a quorum time not above it), with
// quorum_ms's default (30 x dead_ms) filled in. `can_multicast`: the transport's caps.
NetJobOptions CheckNetJobOptions(NetJobOptions opt, bool can_multicast);

// What Attach makes of the settings for a host buffer of `n` floats whose parameter blobs start
// at `params`: kAgreeNet's default hash (the buffer's length and those offsets: two machines
// agree only on one net), and the chunks: chunk_floats (0: the most a message of
// `max_payload` bytes carries, a multiple of 4; more is an Error line), cut at the parameter
// boundaries where `cut_at_params`.
uint64_t BufferDigest(size_t n, const std::vector<size_t>& params);
ChunkLayout JobChunks(const NetJobOptions& opt, size_t n, const std::vector<size_t>& params, bool cut_at_params,
                      uint32_t max_payload);

}  // namespace hogstream
