// The delta rule between a MASTER and a SLAVE copy of a flat weight buffer: the two endpoints
// that run it over any transport (they see only transport/transport.hpp). Not for: threads and
// topology (sync/local_segment.hpp runs it in one process; the network daemon later), backends.
//
// The buffer is cut into chunks (offset, length) of `chunk_floats` floats (the last may be
// shorter). Per chunk, round-robin, forever:
//   1. master posts POSITION pos = its current values, with seq = that chunk's next number;
//   2. slave, for each element:  d = w - last;  w = w + (pos - last);  last = pos + d;
//      and posts DELTA d with the same seq;
//   3. master: w += d.
// `last` is what the master holds for this chunk once it has applied d (its own concurrent
// updates aside), so w - last is exactly the slave's progress not yet sent. NOTE: DESIGN.md
// writes `last = pos`; that double-counts: with w = last + u, pos = m, the slave sends u, then
// next round sends (m + u) - m = u again, and the master grows without bound. Hence pos + d.
//
// Invariant (real arithmetic): master + (deltas in flight) + (w - last) + (deltas dropped)
//   = initial + all master increments + all slave increments.
// The invariant holds whatever position the slave answers, so sequence numbers are about
// freshness, not safety: the slave ignores a POSITION not newer than the last it applied for
// that chunk (a duplicate, or one overtaken), so its view never steps back; the master applies
// each DELTA seq once per slave (a 64-seq window per (slave, chunk) catches duplicates, while
// the answers of several slaves to one multicast position are all applied) but still applies a
// reordered older one, since deltas are disjoint progress.
// Epochs: a master stamps its positions with its epoch (an incarnation number that grows: by
// default the second it started), and its sequence numbers start again at 1 in a new one. A
// slave takes a position of a newer epoch whatever its seq (a restarted master is not ignored),
// ignores one of an older epoch, and echoes the epoch in its delta; the master drops a delta of
// another epoch (it answers a position of an earlier incarnation, whose seqs mean nothing now). A dropped POSITION delays its chunk
// by one sweep. A dropped DELTA loses exactly that delta: the slave's progress on that chunk
// during one round, never more, and never a corruption of the weights.
// (Recovering it would need an ack from the master and a copy of every unacked delta on the
// slave: one more buffer of n floats; not done.)
//
// Codecs (--compress, sync/codec.hpp): the slave sends e = decode(encode(d)) instead of d and
// sets last = pos + e. The invariant above still holds exactly, because what the master adds is
// e, and what the slave keeps as unsent progress is w - last = (w - last_old) - e = d - e plus
// any concurrent progress: the quantisation residual is not dropped but carried, and it goes
// out with the chunk's next delta (error feedback, with `last` as the only memory). A lossy
// position pos' (fp16, int8) changes only the slave's copy: w moves by pos' - last and last
// becomes pos' + e, so w - last is unchanged and the next position corrects the copy; no
// error accumulates on either side.
// Weights (--aggregate, sync/aggregate.hpp; --policy=weedout:N): the master may add k e with
// k < 1 (or drop e); the slave still sets last = pos + e, so (1 - k) e is discarded by design,
// not resent.
//
// Concurrency (Hogwild): solver threads write w on both sides while the rule reads and writes
// it, without locks. A solver write that lands between the rule's read and write of an element
// is lost, as in any Hogwild update; nothing else breaks: no check looks at values. Plain float
// accesses (Access::kPlain, the default) are a formal data race that is benign on every target
// we build for (aligned 4-byte loads and stores do not tear); Access::kAtomic uses relaxed
// std::atomic_ref<float> instead, re-reads w just before writing it (narrowing the lost-write
// window), and is not vectorised: bench/segment_bench measured it 2-3x slower than kPlain
// (64 MiB buffer, 64 KiB chunks: 2.5 vs 7.2 GB/s of weights synchronised), hence the default.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "sync/figures.hpp"  // kStalenessBuckets
#include "sync/aggregate.hpp"
#include "sync/codec.hpp"
#include "sync/wire.hpp"

namespace hogstream {

enum class Access { kPlain, kAtomic };

// Deltas applied per chunk of one master buffer, shared by every MasterEndpoint that applies
// to that buffer (one per slave or destination), so that a delta's staleness counts everyone's
// updates. Any thread; relaxed atomics.
//
// Classes (gsp across machines): senders of one class (`classes[peer]` >= 0, the machines of
// one synchronous group) share one staleness clock per chunk, so a delta's staleness counts
// the updates since its GROUP's last one, not its sender's; a sender outside the list (or
// with a negative class) is a class of its own.
class ChunkUpdates {
 public:
  explicit ChunkUpdates(uint32_t count, std::vector<int> classes = {});
  uint32_t count() const { return count_; }
  uint64_t get(uint32_t c) const { return n_[c].load(std::memory_order_relaxed); }
  uint64_t Bump(uint32_t c) { return n_[c].fetch_add(1, std::memory_order_relaxed) + 1; }
  // The count just after the last delta of `peer`'s class on chunk c (0: none), or nullptr
  // when `peer` is a class of its own.
  std::atomic<uint64_t>* class_last(PeerId peer, uint32_t c) const {
    if (peer >= classes_.size() || classes_[peer] < 0) return nullptr;
    return &class_last_[static_cast<size_t>(classes_[peer]) * count_ + c];
  }

 private:
  std::unique_ptr<std::atomic<uint64_t>[]> n_;
  uint32_t count_;
  std::vector<int> classes_;
  std::unique_ptr<std::atomic<uint64_t>[]> class_last_;
};

// The pluggable part of the rule: how messages are encoded (the policy's codec; the slave keeps
// what the encoding lost in w - last: see codec.hpp), and how much of each delta the master
// takes (the aggregation rule, sync/aggregate.hpp). Staleness of a delta = the deltas of other
// slaves applied to its chunk since this slave's previous one, + 1 (1 for a slave's first;
// with P slaves at equal pace, about P).
struct SegmentRule {
  Codec codec;
  // Master: drop (and count) a delta whose staleness exceeds this, 0 = never: its sender's
  // previous report on that chunk is not among the chunk's last `weedout` (SpeeDO's weed-out).
  uint32_t weedout = 0;
  // Shared by the endpoints of one master buffer; null: this endpoint counts its own deltas.
  std::shared_ptr<ChunkUpdates> updates;
  // How the master takes each delta (sync/aggregate.hpp: its weight, any per-chunk state, the
  // value bound); shared by the endpoints of one master buffer. Null: every delta whole.
  std::shared_ptr<AggregateRule> aggregate;
};

// Why a master refused a delta or a slave a position (counted, and reported once per sender by
// whoever set the endpoint's on_refused).
enum class Refusal { kNonFinite, kAbsurd };
using RefusedFn = std::function<void(PeerId from, uint32_t chunk, Refusal why)>;

// How a buffer of n floats is cut into chunks: runs of chunk_floats floats; with `boundaries`
// (offsets where a new piece begins, e.g. each of a net's parameter blobs), also cut at each,
// so no chunk straddles two pieces (what a rule or codec that works per parameter asks for).
// Boundaries must be ascending; 0, n and repeats are ignored; one past n is an Error.
struct ChunkLayout {
  ChunkLayout(size_t n, uint32_t chunk_floats, const std::vector<size_t>& boundaries = {});
  size_t n;
  uint32_t chunk_floats;  // the longest chunk
  uint32_t count;         // number of chunks
  size_t offset(uint32_t c) const { return starts_.empty() ? static_cast<size_t>(c) * chunk_floats : starts_[c]; }
  uint32_t length(uint32_t c) const;

 private:
  std::vector<size_t> starts_;  // with boundaries: count + 1 offsets (the last is n); else empty
};

// Which chunks of `layout` lie wholly inside one of `skip`'s [begin, end) float ranges: chunks a
// rule carries by other means (--svb, sync/svb.hpp), for which no position or delta may go.
// A chunk straddling a range's edge is an Error (cut the layout at the edges).
std::vector<bool> SkippedChunks(const ChunkLayout& layout, const std::vector<std::pair<size_t, size_t>>& skip);

// The slave's side of the rule over n elements, as SlaveEndpoint runs it on float32 messages
// with plain access: d = w - last; w = w + (pos - last); last = pos + d; delta = d. (The GPU
// segment's kernel, core/slave_rule.hpp, is held to it by the tests.)
void SlaveRule(float* w, float* last, const float* pos, float* delta, size_t n);

// Which peer masters each chunk when every machine is master of a share of the weights and
// slave of the rest: peer peers[r] masters a contiguous run of about count / peers.size()
// chunks, in list order (the first count % size peers one more). With `weights` (one per
// peer, > 0), the runs are in proportion to them instead (the chunks left over by rounding
// down go one each to the largest remainders, the earlier peer first on a tie; equal weights
// share as without). Every chunk has one owner. An empty list is a user Error.
std::vector<PeerId> ShareChunks(uint32_t count, const std::vector<PeerId>& peers, const std::vector<double>& weights = {});

// Flow control of a master: how many positions may await their delta at once. A network
// link has no back-pressure of its own (a UDP or raw receiver that falls behind drops), so the
// master keeps at most `window` positions unanswered, as a TCP sender keeps its window; a
// position whose delta does not come back within `answer_timeout_us` (lost either way, or the
// slave is slow) stops counting, so losses never stall the stream.
struct FlowOptions {
  uint32_t window = 0;               // positions awaiting a delta; 0 = no limit (slots only)
  uint32_t answer_timeout_us = 20000;
};

// Master side. One thread at a time drives it (PostPositions, PollDeltas); stats() from any.
class MasterEndpoint {
 public:
  // `master` is borrowed; solver threads may write it concurrently. Positions go to `slaves`
  // (a peer, or a group of them); deltas are accepted from any peer.
  MasterEndpoint(float* master, size_t n, uint32_t chunk_floats, Transport* transport, Dest slaves,
                 Access access = Access::kPlain, FlowOptions flow = {})
      : MasterEndpoint(master, ChunkLayout(n, chunk_floats), transport, slaves, access, flow) {}
  // The same with any layout (cut at parameter boundaries, say); the slaves' must be equal.
  MasterEndpoint(float* master, const ChunkLayout& layout, Transport* transport, Dest slaves,
                 Access access = Access::kPlain, FlowOptions flow = {});

  // Posts the POSITIONs of up to `max` next chunks in round-robin order, as many as send slots
  // and the window allow, then one Flush (one sendmmsg, one ring kick, one doorbell). Returns
  // how many went; a chunk that found no slot goes first next time.
  size_t PostPositions(size_t max);
  // This master leaves (NetJob's leave on notice): the final values of every chunk it streams
  // (MsgKind::kFinal), which its slaves take without answering, then one Flush. False when
  // send slots ran out before the last (call again: a final taken twice changes nothing).
  bool PostFinals();
  // The same for these chunks only (a re-share: the chunks this machine no longer masters),
  // their values read from `values` (a buffer of the layout; default: the master's weights).
  // A re-share sends the values its slave side took as its own `last` for those chunks: a
  // solver's write between two reads of the weights would go out in the final and again in
  // w - last.
  bool PostFinals(const std::vector<uint32_t>& chunks, const float* values = nullptr);
  // One position and its Flush: PostPositions(1) == 1.
  bool PostNextPosition() { return PostPositions(1) == 1; }
  // The epoch stamped on positions (default: seconds since 1970 when it was made). Set it
  // before the first post; a later epoch than any before tells slaves this is a new master.
  void set_epoch(uint32_t epoch) { epoch_ = epoch; }
  uint32_t epoch() const { return epoch_; }
  // Streams only these chunks (the ones this machine masters), round-robin in this order; a
  // sweep is one pass over them. Default: every chunk. An empty list or a chunk out of range is
  // a user Error. Set it before the first post.
  void set_owned(std::vector<uint32_t> chunks);
  // How many slaves answer each position (the members of a multicast group besides this
  // master; 1 for a single peer, the default). With a window, a position awaits all of their
  // deltas, so the window is as wide as its slowest receiver lets it be (each receiver's
  // outstanding positions are bounded, not only the first answerer's). Takes effect for
  // positions posted from now on.
  void set_receivers(uint32_t n) { receivers_ = n ? n : 1; }
  // Applies every DELTA waiting. Returns how many were applied.
  size_t PollDeltas();
  // The same for one DELTA a caller polled itself (a daemon that reads one transport for
  // several endpoints); anything else is counted malformed. Returns whether it was applied.
  bool OnDelta(const Message& m);
  // The iteration clock stamped on positions (the job's global iteration); staleness is
  // measured against it. Set it from the driving thread.
  void set_clock(uint64_t clock) { clock_ = clock; }
  // Codec, weighting and weed-out (see SegmentRule). Before the first post; the slaves' codec
  // must be the same (their messages in another encoding are counted malformed).
  void set_rule(SegmentRule rule);
  const SegmentRule& rule() const { return rule_; }
  // Called on the driving thread for each delta refused by value (DeltaCheck, sync/aggregate.hpp).
  void set_on_refused(RefusedFn fn) { on_refused_ = std::move(fn); }

  const ChunkLayout& layout() const { return layout_; }
  uint32_t next_chunk() const { return owned_.empty() ? next_ : owned_[next_]; }
  uint32_t sweep_length() const { return owned_.empty() ? layout_.count : static_cast<uint32_t>(owned_.size()); }
  uint32_t in_flight() const { return in_flight_; }  // positions awaiting their delta

  struct Stats {
    uint64_t positions_sent, deltas_applied, deltas_duplicate, deltas_too_old, malformed,
        bytes_sent, sweeps, unanswered;  // unanswered: positions whose delta never came in time
    uint64_t deltas_other_epoch;       // answers to an earlier incarnation's positions
    // Staleness of the deltas applied: the master's clock when applying minus the clock of the
    // position the slave's progress started from (sum, to average over deltas_applied; max).
    uint64_t staleness_sum, staleness_max;
    uint64_t deltas_weeded;   // dropped by the weed-out rule
    uint64_t weight_milli;    // sum of the weights applied, in thousandths (mean = / deltas_applied)
    uint64_t refused_nonfinite, refused_absurd;  // deltas refused by value (DeltaCheck)
  };
  Stats stats() const;

  // What one slave's deltas did here: applied, refused by value, and the staleness of those
  // applied (sum and histogram over kStalenessBounds, in the clock's iterations).
  struct SourceStats {
    uint64_t applied = 0, refused = 0, staleness_sum = 0;
    uint64_t staleness[kStalenessBuckets] = {};
    void Add(const SourceStats& o);
  };
  // Per slave heard from. The driving thread only (the figures are not atomic).
  std::vector<std::pair<PeerId, SourceStats>> source_stats() const;

 private:
  // Chunk c's values (of `from`, a buffer of the layout, default the weights) and header (a
  // new seq) in `slot`, as a message of `kind`.
  Header Values(uint32_t c, MsgKind kind, std::byte* slot, const float* from = nullptr);
  void Answered(uint32_t chunk, uint64_t seq);  // a fresh delta for (chunk, seq) came back
  void Expire();  // stops counting positions unanswered for answer_timeout_us

  float* w_;
  ChunkLayout layout_;
  Wire wire_;         // the transport, with sync's header on every message
  Wire* t_ = &wire_;
  Dest slaves_;
  Access access_;
  FlowOptions flow_;
  uint32_t next_ = 0;               // index into owned_ (or the chunk itself when owned_ is empty)
  std::vector<uint32_t> owned_;     // the chunks this master streams; empty: all
  uint32_t epoch_;
  uint64_t clock_ = 0;
  SegmentRule rule_;
  std::vector<float> scratch_;  // a chunk decoded or to encode
  std::vector<uint64_t> seq_;   // last seq posted, per chunk
  // The replay window of one slave: per chunk, the highest delta seq applied and, bit k, whether
  // delta high - k was applied (64 seqs). One per slave heard from, made at its first delta.
  struct Replay {
    std::vector<uint64_t> high, seen;
    std::vector<uint64_t> last_update;  // the chunk's update count after this slave's last delta; 0: none
    SourceStats figures;
  };
  Replay& Window(PeerId from);  // that slave's window (made at its first delta)
  // Whether delta seq of chunk c is new to window r (a duplicate or one too old is counted).
  bool Fresh(const Replay& r, uint32_t c, uint64_t seq);
  void Mark(Replay& r, uint32_t c, uint64_t seq);  // seq applied: a later copy is a duplicate
  // The staleness of a fresh delta from `r` on chunk c, its update counted (0: weeded out).
  uint64_t Count(PeerId source, Replay& r, uint32_t c);
  // Whether delta d of chunk c may be applied (finite, not absurd); counts and reports if not.
  bool Acceptable(PeerId source, uint32_t c, const float* d, uint32_t len);
  RefusedFn on_refused_;
  DeltaCheck check_;
  std::unordered_map<PeerId, Replay> replay_;
  // The window: pending_[c] = seq of chunk c's position awaiting its delta (0 = none);
  // posted_ = (chunk, seq, time posted) oldest first, entries no longer pending skipped lazily.
  struct Posted {
    uint32_t chunk;
    uint64_t seq;
    int64_t at_us;
  };
  std::vector<uint64_t> pending_;
  std::vector<uint32_t> awaiting_;  // per chunk: answers the pending position still awaits
  uint32_t receivers_ = 1;
  std::vector<Posted> posted_;  // a ring of 2 * window entries (answered ones leave lazily)
  size_t posted_head_ = 0, posted_size_ = 0;
  uint32_t in_flight_ = 0;
  std::atomic<uint64_t> positions_sent_{0}, deltas_applied_{0}, deltas_duplicate_{0},
      deltas_too_old_{0}, malformed_{0}, bytes_sent_{0}, sweeps_{0}, unanswered_{0}, deltas_other_epoch_{0},
      staleness_sum_{0}, staleness_max_{0}, deltas_weeded_{0}, weight_milli_{0}, refused_nonfinite_{0},
      refused_absurd_{0};
};

// Slave side. One thread at a time drives it (PollPositions); stats() from any.
class SlaveEndpoint {
 public:
  // `slave` is borrowed and must equal the master at construction (last starts as a copy).
  SlaveEndpoint(float* slave, size_t n, uint32_t chunk_floats, Transport* transport,
                Access access = Access::kPlain)
      : SlaveEndpoint(slave, ChunkLayout(n, chunk_floats), transport, access) {}
  SlaveEndpoint(float* slave, const ChunkLayout& layout, Transport* transport,
                Access access = Access::kPlain);

  // Answers waiting POSITIONs with DELTAs (to the peer that sent each) while a send slot is
  // free, then flushes. Positions are polled in batches; a batch is released once all of it is
  // answered, so up to a batch of received messages may stay held between calls. Returns how
  // many were answered.
  size_t PollPositions();
  // The same for one POSITION a caller polled itself (a daemon that reads one transport for
  // several endpoints): false = no send slot for its delta (try again later; nothing changed),
  // true = done with it (answered, or counted as stale, foreign or malformed). Does not Flush.
  bool Answer(const Message& m);
  // Takes a chunk's positions only from its owner (owners[c], e.g. from ShareChunks) and never
  // for a chunk `self` owns (this machine is that chunk's master); others are counted in
  // positions_foreign and ignored. Default: any sender. A table of the wrong size is an Error.
  // A chunk whose owner changes forgets the old owner's epoch and seq, so the new owner's
  // positions count whatever its numbering.
  void set_owners(std::vector<PeerId> owners, PeerId self);
  // Forgets the epoch and seq of every chunk `peer` owns: it restarted (a new incarnation),
  // and its numbering starts again.
  void ForgetOwner(PeerId peer);
  // Positions from `peer` with an epoch below `floor` are stale whatever the chunk has heard
  // (counted in positions_stale): a job binds data frames to the sender's run this way, the
  // floor being the first epoch of the run it proved (sync/net_job.cpp); until then it is the
  // highest epoch, so nothing of an unproven run is taken. Default: 0 for every peer.
  void set_min_epoch(PeerId peer, uint32_t floor);
  // A leaving master's last values of one chunk (MsgKind::kFinal: NetJob's leave on notice,
  // and every re-share for the chunks that change hands): taken as a position is, from the
  // chunk's owner and newer than the last one, but not answered: w = final + (w - last),
  // last = final, so this copy's progress since stays to go to the chunk's next master. Where
  // this machine has just become the chunk's owner, the final of its previous owner is taken
  // the same way, once: w - last is then this copy's progress and the deltas its new master
  // applied since, and the owner starts from the previous owner's values with all of it. The
  // same final taken twice changes nothing. Returns whether it was taken (else counted as a
  // position would be: stale, foreign, malformed or refused).
  bool TakeFinal(const Message& m);
  // Chunks owned by `peer` whose final this slave has taken (since that owner took them).
  uint32_t finals_from(PeerId peer) const;
  // `last`, per element: the master's values as this copy last took them (for a chunk it
  // no longer masters, what set_owners read of the weights: what its final must carry).
  const float* last() const { return last_.get(); }
  // Positions answered for chunk c so far (a new position of each chunk since some moment
  // means this slave's progress up to then has gone out).
  uint64_t answers(uint32_t c) const { return answers_[c]; }
  // Chunks that have had at least one position applied since construction.
  uint32_t chunks_heard() const { return chunks_heard_; }
  // The codec (the master's must be the same). Before the first position.
  void set_codec(const Codec& codec);
  // Elastic averaging (--policy=easgd:ALPHA) instead of the delta rule: on a position (the
  // centre c), e = alpha (w - c); w -= e; the delta sent is e and the master adds it to c.
  // `last` is not used. 0: the delta rule.
  void set_elastic(float alpha) { elastic_ = alpha; }
  // Called on the driving thread for each position refused by value (a non-finite element).
  void set_on_refused(RefusedFn fn) { on_refused_ = std::move(fn); }
  // This copy is lost (it went non-finite): each chunk's next position is taken whole
  // (w = last = pos, nothing sent back as progress: a zero delta), and chunks_heard() counts
  // from zero again. Chunks `self` owns are left alone. Driving thread only.
  void RetakeAll();
  // Chunks still to be re-taken since RetakeAll (0: none).
  uint32_t retaking() const { return retaking_; }

  const ChunkLayout& layout() const { return layout_; }

  struct Stats {
    uint64_t positions_applied, positions_stale, malformed, bytes_sent;
    uint64_t positions_foreign;  // from a peer that does not own the chunk, or for our own chunk
    uint64_t positions_refused;  // with a non-finite element
  };
  Stats stats() const;

 private:
  // Answer's steps (segment.cpp): whether to drop a position (counted); its values, or nullptr
  // (counted); the rule for one chunk, writing the delta into a send slot.
  bool Malformed(const Message& m, MsgKind kind);  // not a `kind` of this layout and codec (counted)
  bool Dropped(const Message& m, MsgKind kind = MsgKind::kPosition);
  const float* PositionValues(const Message& m, uint32_t len);
  void WriteDelta(uint32_t c, size_t off, uint32_t len, const float* pos, std::byte* slot);
  void TakeWhole(uint32_t c, size_t off, uint32_t len, const float* pos);

  float* w_;
  ChunkLayout layout_;
  Wire wire_;         // the transport, with sync's header on every message
  Wire* t_ = &wire_;
  Access access_;
  struct FreeDelete {
    void operator()(float* p) const;
  };
  std::unique_ptr<float[], FreeDelete> last_;  // 64-byte aligned
  Codec codec_;
  float elastic_ = 0;
  std::vector<float> pos_, delta_;  // a position decoded, a delta to encode (compressed only)
  std::vector<uint64_t> seq_;    // last position seq applied, per chunk
  std::vector<uint32_t> epoch_;  // the epoch of that position, per chunk
  std::vector<uint64_t> clock_;  // the clock of that position, per chunk
  std::vector<uint64_t> answers_;  // positions answered, per chunk
  uint32_t chunks_heard_ = 0;
  std::vector<PeerId> owners_;   // per chunk; empty: any sender
  std::vector<uint32_t> min_epoch_;  // per peer (set_min_epoch); empty or short: 0
  PeerId self_ = kNoPeer;
  RefusedFn on_refused_;
  std::vector<uint8_t> retake_;  // per chunk: take the next position whole (RetakeAll)
  std::vector<uint8_t> final_;   // per chunk: its owner's final taken (TakeFinal)
  // Per chunk that became this machine's: its previous owner and the last epoch taken from it
  // (kNoPeer: none, or its final already taken).
  std::vector<PeerId> prev_owner_;
  std::vector<uint32_t> prev_epoch_;
  uint32_t retaking_ = 0;
  // The batch last polled: batch_[next_, polled_) not yet answered (held by the transport until
  // the whole batch is answered and released).
  static constexpr size_t kBatch = 32;
  Message batch_[kBatch];
  size_t polled_ = 0, next_ = 0;
  std::atomic<uint64_t> positions_applied_{0}, positions_stale_{0}, malformed_{0}, bytes_sent_{0},
      positions_foreign_{0}, positions_refused_{0};
};

// A machine daemon's data plane, one code path for NetJob and the simulator: a POSITION is
// answered by `slave` (flushing `t` once if no send slot is free; false: still none, the frame
// waits and nothing changed), a DELTA is applied by `master`, the master of its chunk here (none:
// the frame is dropped). True for every other kind too: those are the caller's.
bool TakeData(const Message& m, SlaveEndpoint& slave, MasterEndpoint* master, Wire& t);

}  // namespace hogstream
