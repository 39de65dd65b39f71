// --svb: Poseidon's sufficient-vector broadcast for InnerProduct weights. Instead of streaming
// the deltas of a big fully connected weight W through the segments, every replica of W
// receives the per-batch FACTORS of every other solver's gradient and rebuilds it.
// Not for: the other parameters (biases, convolutions, small InnerProducts), which stream
// through the segments as usual; threads and sockets (sync/hogwild.cpp and sync/net_job.cpp
// wire it), the solver rule (core/solver.*).
//
// The rule. An InnerProduct layer with M outputs, N inputs and batch B has the weight gradient
//   G = topdiffᵀ · bottom        (M x N; transpose: bottomᵀ · topdiff, N x M)
// a sum of B rank-1 products, so the pair (topdiff B x M, bottom B x N) is a "sufficient
// vector" set of B (M + N) floats. A layer is worth it where B (M + N) < M N (LeNet's ip1:
// 64 x 1300 = 83 200 floats instead of 400 000; ip2, 10 x 500, is not). Each solver, after its
// backward and before its update:
//   1. publishes its factors of each such layer to every other replica (with its iteration);
//   2. adds into W's diff the gradient rebuilt from every factor set received since its last
//      step (the same gemm the layer's own backward runs, so the same normalisation);
//   3. its own solver rule (lr, lr_mult, momentum, weight decay, clipping) then applies to the
//      sum.
// Why it is right: every replica of W sees every solver's gradient exactly once (its own at
// once, the others' at its next step), so the replicas move as one synchronous data-parallel
// job would, up to staleness and solver history. The segments must NOT carry W as well (its
// progress would count twice): its chunks are left out of delta streaming (a layout cut at
// parameter boundaries, and SkippedChunks in sync/segment.hpp), so no position or delta goes
// for them. Where the factors travel:
//   - in one process (--private solvers): SvbHub, a locked inbox per solver that holds shared,
//     immutable sets (one copy per set, whatever the number of readers; nothing is lost). The
//     master weights the leader tests and snapshots get W from solver 0's replica (a memcpy
//     before each of its steps and at its end: no link traffic).
//   - across machines: SvbLink, on the network daemon's transport (sync/net_job.hpp). Each
//     machine's host buffer IS a replica: its local solvers train it directly and fold in the
//     remote sets. A set is cut into MsgKind::kFactors messages (header: chunk = layer,
//     seq = the sender's set number for that layer, clock = its iteration, epoch = its
//     incarnation; payload: FactorPart, then floats) sent once to the multicast group where the
//     daemon multicasts, else once to each live machine, and reassembled by the receivers.
//
// What it loses. Over a lossy wire a set with a part missing after `deadline_ms` is DROPPED and
// counted: that replica misses one gradient of one solver, for good (no retransmission); a
// set still queued when the outbox is full is dropped and counted too (the sender could not
// keep up, though a full outbox first holds the publishing solver back for up to wait_ms).
// Duplicates, late parts of a finished or dropped set, foreign and malformed parts
// are counted and ignored; nothing corrupt is ever applied (sizes are checked against the
// layer). Replicas drift apart by what each missed, plus rounding: nothing pulls them back.
// Weight decay: each replica applies decay once per own step to the sum of gradients (not
// once per gradient, as streaming the deltas of P solvers does), so W decays P times less
// than the streamed parameters. The master's W (one process) is solver 0's replica before its
// last step, plus that step at its end: what reached solver 0 after its last step is missing.
// Refused: iter_size > 1 (the factors of one pass only), a machine joining a running job (W
// never travels as values), --private across machines, and policies other than async.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <deque>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "sync/wire.hpp"

namespace hogstream {

class Net;

// One InnerProduct weight that travels as factors.
struct SvbLayer {
  std::string name;
  int layer = 0;            // index in the net's layers
  size_t offset = 0;        // W in the flat parameter buffer, in floats
  int outputs = 0, inputs = 0, batch = 0;  // M, N, B
  bool transpose = false;   // W is N x M
  size_t weights() const { return static_cast<size_t>(outputs) * inputs; }
  size_t floats() const { return static_cast<size_t>(batch) * (outputs + inputs); }  // one set
};

// The InnerProduct layers of `net` where B (M + N) < M N, in layer order (at most 65536).
std::vector<SvbLayer> FindSvbLayers(Net& net);
// Across machines W never travels as values, so every machine must start from the same W: each
// fills its SVB weights from its layer's filler with a Context seeded with `seed` (the same on
// every machine), in the net and in `master` (its host copy).
void FillSvbWeights(Net& net, const std::vector<SvbLayer>& layers, uint64_t seed, float* master);
// Their weights as [begin, end) float ranges of the flat buffer, for SkippedChunks.
std::vector<std::pair<size_t, size_t>> SvbRanges(const std::vector<SvbLayer>& layers);

// One solver's factors of one layer for one iteration: topdiff (B x M), then bottom (B x N).
struct FactorSet {
  uint32_t layer = 0;  // index into the layer list
  uint64_t iter = 0;   // the sender's iteration (the global count when it stepped)
  std::vector<float> data;
};
using FactorSetPtr = std::shared_ptr<const FactorSet>;

// Copies the factors of layer `l` out of `net` after its backward (the layer's top diff and
// bottom data are still there) into `out` (l.floats() floats).
void CaptureFactors(Net& net, const SvbLayer& l, float* out);
// diff (W's gradient, l.weights() floats) += the gradient the factors rebuild: the same gemm,
// alpha and layout as InnerProductLayer's own backward.
void AddFactorGradient(const SvbLayer& l, const float* factors, float* diff);

// Figures of an exchange, for the log lines and tests.
struct SvbFigures {
  uint64_t sets_published = 0;  // sets made by this process's solvers
  uint64_t bytes_sent = 0;      // factor payload bytes sent (in one process: one copy per reader)
  uint64_t sets_applied = 0;    // sets folded into a replica's step
  uint64_t sets_dropped = 0;    // received incomplete: dropped at the deadline
  uint64_t sets_unsent = 0;     // never sent: the outbox was full
  uint64_t parts_duplicate = 0, parts_late = 0, parts_malformed = 0;
};

// Complete sets waiting for a replica's next step. Any thread; a mutex (one short critical
// section per set and per step, far off the per-element paths).
class FactorInbox {
 public:
  void Put(FactorSetPtr set);
  std::vector<FactorSetPtr> Take();

 private:
  std::mutex mu_;
  std::vector<FactorSetPtr> sets_;
};

// The factors between the solvers of one process: every published set goes (shared, not
// copied) to every other member's inbox. Publish/Take from any solver's thread.
class SvbHub {
 public:
  explicit SvbHub(int members);
  void Publish(int from, const FactorSetPtr& set);
  std::vector<FactorSetPtr> Take(int member) { return inboxes_[member]->Take(); }
  int members() const { return static_cast<int>(inboxes_.size()); }
  uint64_t bytes_sent() const { return bytes_.load(std::memory_order_relaxed); }

 private:
  std::vector<std::unique_ptr<FactorInbox>> inboxes_;
  std::atomic<uint64_t> bytes_{0};
};

// The prefix of a kFactors payload; the floats follow (16 bytes: they stay aligned).
struct FactorPart {
  uint32_t part;      // index of this part
  uint32_t parts;     // parts of the set
  uint32_t per_part;  // floats per part (the last may carry fewer)
  uint32_t total;     // floats of the set
};
static_assert(sizeof(FactorPart) == 16, "the floats after the prefix stay 16-byte aligned");

struct SvbLinkOptions {
  uint32_t deadline_ms = 1000;  // an incomplete set is dropped this long after its first part
  size_t outbox = 64;           // sets queued to send at most
  uint32_t wait_ms = 200;       // a Publish into a full outbox waits this long for room, then
                                // drops the oldest queued set (counted)
};

// The factors between machines, over one transport driven by one daemon thread (the net job's).
// Publish and Take from any thread (solvers); Send, OnMessage, Expire from the daemon only.
class SvbLink {
 public:
  SvbLink(std::vector<SvbLayer> layers, SvbLinkOptions opt = {});

  // Any thread: queues one set of this machine's factors for every destination. With the
  // outbox full (the wire slower than the solvers) it waits up to wait_ms for the daemon to
  // make room (flow control: the solver slows to the link rather than lose gradients), then
  // drops the oldest queued set.
  void Publish(FactorSetPtr set);
  // Daemon: sends queued parts to `dests` while `t` has send slots (each set to each dest in
  // turn), stamping `epoch` (this machine's incarnation). Returns the parts sent. Flushes.
  size_t Send(Wire* t, const std::vector<Dest>& dests, uint32_t epoch);
  // Daemon: one kFactors message; a complete set goes to the inbox.
  void OnMessage(const Message& m);
  // Daemon: drops (and counts) the sets incomplete for longer than the deadline.
  void Expire();
  // Any thread: the complete sets received since the last call.
  std::vector<FactorSetPtr> Take() { return inbox_.Take(); }

  const std::vector<SvbLayer>& layers() const { return layers_; }
  SvbFigures figures() const;  // any thread
  std::string Line() const;    // any thread: "SVB: 12.3 MiB of factors out, 40 sets in, ..."
  uint64_t queued() const;     // sets not yet sent to every destination

 private:
  struct Outgoing {
    FactorSetPtr set;
    uint64_t seq;
    size_t dest = 0;    // index into the destinations of the current Send
    uint32_t part = 0;  // next part to that destination
  };
  struct Pending {  // a set being reassembled
    std::vector<float> data;
    std::vector<bool> have;
    uint32_t got = 0;
    uint64_t iter = 0;
    std::chrono::steady_clock::time_point first;
  };
  // The sets of one (sender, layer) already finished (complete or dropped): the highest seq and
  // a 64-seq window below it; older seqs count as finished.
  struct Window {
    uint64_t high = 0, seen = 0;
    bool Has(uint64_t seq) const;
    void Mark(uint64_t seq);
  };
  using Key = std::tuple<PeerId, uint32_t, uint64_t>;  // sender, layer, seq

  std::vector<SvbLayer> layers_;
  SvbLinkOptions opt_;
  mutable std::mutex out_mu_;
  std::condition_variable out_cv_;     // room in the outbox
  std::deque<Outgoing> out_;           // under out_mu_
  std::vector<uint64_t> next_seq_;     // per layer, under out_mu_
  std::map<Key, Pending> pending_;     // daemon
  std::map<std::pair<PeerId, uint32_t>, Window> done_;  // daemon
  std::map<PeerId, uint32_t> epoch_;   // the incarnation heard from each sender (daemon)
  FactorInbox inbox_;
  std::atomic<uint64_t> published_{0}, bytes_sent_{0}, received_{0}, dropped_{0}, unsent_{0}, duplicate_{0},
      late_{0}, malformed_{0};
};

// One process's side of SVB: what each solver does after its backward, and the figures.
// OnGradient/OnTrainEnd from solver i's own thread.
class SvbRun {
 public:
  // In one process: `members` solvers on private copies; `master` (the job's weights, tested
  // and snapshotted) gets W from solver 0's replica.
  SvbRun(std::vector<SvbLayer> layers, int members, float* master);
  // Across machines: the local solvers train one replica (the host buffer); factors go out and
  // come in through `link`.
  SvbRun(std::vector<SvbLayer> layers, std::shared_ptr<SvbLink> link);

  // After solver i's backward, before its update: publish its factors, fold in the others'.
  void OnGradient(int i, Net& net);
  // After solver i's last step (in one process, solver 0 hands W to the master).
  void OnTrainEnd(int i, Net& net);

  const std::vector<SvbLayer>& layers() const { return layers_; }
  SvbFigures figures() const;
  std::string Line() const;  // "SVB ip1: 12.3 MiB of factors sent, ..."

 private:
  void RefreshMaster(Net& net);

  std::vector<SvbLayer> layers_;
  std::unique_ptr<SvbHub> hub_;
  std::shared_ptr<SvbLink> link_;
  float* master_ = nullptr;
  std::atomic<uint64_t> published_{0}, applied_{0};
};

}  // namespace hogstream
