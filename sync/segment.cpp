// The delta rule's kernels, the two endpoints and the in-process Segment daemon (see
// segment.hpp for the rule, its invariant and the Hogwild race). The kernels are the hot path:
// contiguous, branch-free per element, vectorised in the plain variant (__restrict: the user
// buffer, `last` and transport slots never overlap).
#include "sync/segment.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

#include "base/common.hpp"

namespace hogstream {

namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;

// Counters below have a single writer (the driving thread), so load + store beats a locked add.
void Add(std::atomic<uint64_t>& c, uint64_t v = 1) { c.store(c.load(kRelaxed) + v, kRelaxed); }

float Load(const float& x) { return std::atomic_ref<float>(const_cast<float&>(x)).load(kRelaxed); }
void Store(float& x, float v) { std::atomic_ref<float>(x).store(v, kRelaxed); }

// POSITION: out = w.
void ReadChunk(const float* __restrict w, float* __restrict out, size_t n, Access a) {
  if (a == Access::kPlain) {
    std::memcpy(out, w, n * sizeof(float));
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = Load(w[i]);
  }
}

// Slave: d = w - last; w = w + (pos - last); last = pos + d; delta = d.
// Per element: reads w, last, pos; writes w, last, delta.
void SlaveRulePlain(float* __restrict w, float* __restrict last, const float* __restrict pos,
                    float* __restrict delta, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float x = w[i], l = last[i], p = pos[i];
    const float d = x - l;
    delta[i] = d;
    w[i] = x + (p - l);
    last[i] = p + d;
  }
}

// Same rule; w is read twice so a solver write landing between the reads stays in w - last.
void SlaveRuleAtomic(float* w, float* __restrict last, const float* __restrict pos,
                     float* __restrict delta, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float l = last[i], p = pos[i];
    const float d = Load(w[i]) - l;
    delta[i] = d;
    Store(w[i], Load(w[i]) + (p - l));
    last[i] = p + d;
  }
}

// Slave with a lossy codec, in two passes around the encoding: d = w - last into `delta`;
// the caller encodes it, leaving e = decode(encode(d)) there; then w += pos - last and
// last = pos + e, so d - e stays in w - last (error feedback).
void SlaveProgress(const float* w, const float* __restrict last, float* __restrict delta, size_t n, Access a) {
  if (a == Access::kPlain) {
    for (size_t i = 0; i < n; ++i) delta[i] = w[i] - last[i];
  } else {
    for (size_t i = 0; i < n; ++i) delta[i] = Load(w[i]) - last[i];
  }
}
void SlaveCatchUp(float* w, float* __restrict last, const float* __restrict pos, const float* __restrict sent,
                  size_t n, Access a) {
  if (a == Access::kPlain) {
    for (size_t i = 0; i < n; ++i) {
      w[i] += pos[i] - last[i];
      last[i] = pos[i] + sent[i];
    }
  } else {
    for (size_t i = 0; i < n; ++i) {
      Store(w[i], Load(w[i]) + (pos[i] - last[i]));
      last[i] = pos[i] + sent[i];
    }
  }
}

}  // namespace

// ---------------------------------------------------------------- ChunkLayout

ChunkLayout::ChunkLayout(size_t n_, uint32_t chunk_floats_, const std::vector<size_t>& boundaries)
    : n(n_), chunk_floats(chunk_floats_) {
  HS_REQUIRE(n > 0) << "a sync segment needs a non-empty buffer";
  HS_REQUIRE(chunk_floats > 0) << "chunk size must be at least one float";
  if (boundaries.empty()) {
    const size_t c = (n + chunk_floats - 1) / chunk_floats;
    HS_REQUIRE(c <= UINT32_MAX) << "too many chunks (" << c << "); use a larger chunk size";
    count = static_cast<uint32_t>(c);
    return;
  }
  size_t piece = 0;  // where the current piece began
  for (size_t i = 0; i <= boundaries.size(); ++i) {
    const size_t end = i < boundaries.size() ? boundaries[i] : n;
    HS_REQUIRE(end >= piece && end <= n) << "chunk boundaries must ascend within the buffer of " << n
                                          << " floats; got " << end << " after " << piece;
    for (size_t at = piece; at < end; at += chunk_floats) starts_.push_back(at);
    piece = end;
  }
  HS_REQUIRE(starts_.size() <= UINT32_MAX) << "too many chunks (" << starts_.size() << "); use a larger chunk size";
  count = static_cast<uint32_t>(starts_.size());
  starts_.push_back(n);
}

uint32_t ChunkLayout::length(uint32_t c) const {
  if (!starts_.empty()) return static_cast<uint32_t>(starts_[c + 1] - starts_[c]);
  return static_cast<uint32_t>(std::min<size_t>(chunk_floats, n - offset(c)));
}

std::vector<bool> SkippedChunks(const ChunkLayout& layout, const std::vector<std::pair<size_t, size_t>>& skip) {
  std::vector<bool> out(layout.count, false);
  for (uint32_t c = 0; c < layout.count; ++c) {
    const size_t a = layout.offset(c), b = a + layout.length(c);
    for (const auto& [begin, end] : skip) {
      if (b <= begin || a >= end) continue;
      HS_REQUIRE(a >= begin && b <= end) << "chunk [" << a << ", " << b << ") straddles the edge of the skipped range ["
                                         << begin << ", " << end << "); cut the chunks at its edges";
      out[c] = true;
    }
  }
  return out;
}

void SlaveRule(float* w, float* last, const float* pos, float* delta, size_t n) {
  SlaveRulePlain(w, last, pos, delta, n);
}

// ---------------------------------------------------------------- ownership

std::vector<PeerId> ShareChunks(uint32_t count, const std::vector<PeerId>& peers, const std::vector<double>& weights) {
  HS_REQUIRE(!peers.empty()) << "sharing chunks among no peers";
  const size_t k = peers.size();
  HS_CHECK(weights.empty() || weights.size() == k) << weights.size() << " weights for " << k << " peers";
  std::vector<size_t> runs(k, count / k);
  if (weights.empty()) {
    for (size_t r = 0; r < count % k; ++r) ++runs[r];
  } else {
    // Largest remainder: each peer's whole part of its quota, then one more chunk to each of
    // the largest fractions (ties: the earlier peer) until every chunk has an owner.
    double sum = 0;
    for (double w : weights) {
      HS_CHECK(w > 0 && std::isfinite(w)) << "a share weight of " << w;
      sum += w;
    }
    std::vector<std::pair<double, size_t>> rest;
    size_t given = 0;
    for (size_t r = 0; r < k; ++r) {
      const double quota = count * weights[r] / sum;
      runs[r] = static_cast<size_t>(quota);
      given += runs[r];
      rest.emplace_back(runs[r] - quota, r);  // the largest fraction sorts first
    }
    std::sort(rest.begin(), rest.end());
    for (size_t i = 0; given < count; ++i, ++given) ++runs[rest[i % k].second];
  }
  std::vector<PeerId> owner(count);
  size_t c = 0;
  for (size_t r = 0; r < k; ++r)
    for (size_t i = 0; i < runs[r]; ++i) owner[c++] = peers[r];
  return owner;
}

// ---------------------------------------------------------------- MasterEndpoint

MasterEndpoint::MasterEndpoint(float* master, const ChunkLayout& layout, Transport* transport,
                               Dest slaves, Access access, FlowOptions flow)
    : w_(master),
      layout_(layout),
      wire_(transport),
      slaves_(slaves),
      access_(access),
      flow_(flow),
      epoch_(static_cast<uint32_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                       std::chrono::system_clock::now().time_since_epoch())
                                       .count())),
      seq_(layout_.count, 0),
      check_(layout_.count),
      pending_(flow.window ? layout_.count : 0, 0),
      awaiting_(flow.window ? layout_.count : 0, 0),
      posted_(flow.window ? 2 * size_t{flow.window} : 0) {
  rule_.updates = std::make_shared<ChunkUpdates>(layout_.count);
  rule_.aggregate = DefaultAggregate();
  HS_REQUIRE(std::min<size_t>(layout_.chunk_floats, layout_.n) * sizeof(float) <= t_->caps().max_payload)
      << "chunk of " << std::min<size_t>(layout_.chunk_floats, layout_.n) << " floats exceeds the transport's "
      << t_->caps().max_payload << " bytes";
}

namespace {
// The longest payload a codec writes for chunks of up to `longest` floats must fit a slot.
void CheckFits(const Codec& c, Encoding e, const ChunkLayout& layout, uint32_t max_payload) {
  const uint32_t longest = static_cast<uint32_t>(std::min<size_t>(layout.chunk_floats, layout.n));
  HS_REQUIRE(std::max(c.Bytes(e, longest), c.Bytes(e, 1)) <= max_payload)
      << "--compress=" << c.name() << ": a chunk of " << longest << " floats does not fit this transport's "
      << max_payload << "-byte messages; use larger chunks";
}

int64_t NowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

void MasterEndpoint::set_rule(SegmentRule rule) {
  HS_REQUIRE(!rule.updates || rule.updates->count() == layout_.count)
      << "shared update counts for " << rule.updates->count() << " chunks, the layout has " << layout_.count;
  if (!rule.updates) rule.updates = std::make_shared<ChunkUpdates>(layout_.count);
  if (!rule.aggregate) rule.aggregate = DefaultAggregate();
  if (rule.aggregate->stateful()) rule.aggregate->Bind(layout_.n, layout_.count);
  CheckFits(rule.codec, rule.codec.position, layout_, t_->caps().max_payload);
  rule_ = std::move(rule);
  scratch_.resize(rule_.codec.compresses() ? layout_.chunk_floats : 0);
}

void MasterEndpoint::set_owned(std::vector<uint32_t> chunks) {
  HS_REQUIRE(!chunks.empty()) << "a master must own at least one chunk";
  for (uint32_t c : chunks)
    HS_REQUIRE(c < layout_.count) << "owned chunk " << c << " out of range (" << layout_.count << " chunks)";
  owned_ = std::move(chunks);
  next_ = 0;
}

void MasterEndpoint::Answered(uint32_t c, uint64_t seq) {
  if (!flow_.window || pending_[c] != seq) return;  // not awaited (expired, or superseded)
  if (--awaiting_[c] > 0) return;                   // other receivers still to answer
  pending_[c] = 0;
  --in_flight_;
}

void MasterEndpoint::Expire() {
  const int64_t now = NowUs();
  while (posted_size_ > 0) {
    const Posted& p = posted_[posted_head_];
    const bool awaited = pending_[p.chunk] == p.seq;
    // The oldest entry leaves when answered, when too old, or when the ring is full.
    if (awaited && now - p.at_us < flow_.answer_timeout_us && posted_size_ < posted_.size()) break;
    if (awaited) {
      pending_[p.chunk] = 0;
      --in_flight_;
      Add(unanswered_);
    }
    posted_head_ = (posted_head_ + 1) % posted_.size();
    --posted_size_;
  }
}

Header MasterEndpoint::Values(uint32_t c, MsgKind kind, std::byte* slot, const float* from) {
  const uint32_t len = layout_.length(c);
  const float* src = (from ? from : w_) + layout_.offset(c);
  const Access access = from ? Access::kPlain : access_;  // (another buffer is this thread's own)
  Header h;
  h.kind = kind;
  h.encoding = rule_.codec.position;
  if (h.encoding == Encoding::kFloat32) {
    ReadChunk(src, reinterpret_cast<float*>(slot), len, access);
    h.length = len * sizeof(float);
  } else {
    ReadChunk(src, scratch_.data(), len, access);
    h.length = static_cast<uint32_t>(rule_.codec.Encode(h.encoding, scratch_.data(), len, slot));
  }
  h.chunk = c;
  h.seq = ++seq_[c];
  h.epoch = epoch_;
  h.clock = clock_;
  return h;
}

bool MasterEndpoint::PostFinals() {
  if (!owned_.empty()) return PostFinals(owned_);
  std::vector<uint32_t> all(layout_.count);
  for (uint32_t c = 0; c < layout_.count; ++c) all[c] = c;
  return PostFinals(all);
}

bool MasterEndpoint::PostFinals(const std::vector<uint32_t>& chunks, const float* values) {
  for (uint32_t c : chunks) {
    std::byte* slot = t_->AcquireSend();
    if (!slot) {
      t_->Flush();
      if (!(slot = t_->AcquireSend())) return false;
    }
    const Header h = Values(c, MsgKind::kFinal, slot, values);
    t_->CommitSend(slaves_, h);
    Add(bytes_sent_, h.length);
  }
  t_->Flush();
  return true;
}

size_t MasterEndpoint::PostPositions(size_t max) {
  size_t posted = 0;
  if (flow_.window) Expire();
  while (posted < max && (!flow_.window || in_flight_ < flow_.window)) {
    std::byte* slot = t_->AcquireSend();
    if (!slot) break;
    const uint32_t c = next_chunk();
    const Header h = Values(c, MsgKind::kPosition, slot);
    t_->CommitSend(slaves_, h);
    if (flow_.window) {
      if (pending_[c] == 0) ++in_flight_;  // else the older position is superseded
      pending_[c] = h.seq;
      awaiting_[c] = receivers_;
      if (posted_size_ == posted_.size()) Expire();  // full of answered entries: drop them
      posted_[(posted_head_ + posted_size_++) % posted_.size()] = {c, h.seq, NowUs()};
    }
    Add(positions_sent_);
    Add(bytes_sent_, h.length);
    if (++next_ == (owned_.empty() ? layout_.count : owned_.size())) {
      next_ = 0;
      Add(sweeps_);
    }
    ++posted;
  }
  t_->Flush();
  return posted;
}

MasterEndpoint::Replay& MasterEndpoint::Window(PeerId from) {
  auto it = replay_.find(from);
  if (it == replay_.end()) {  // a slave's first delta: its window (seq 0 is never sent: applied)
    it = replay_.emplace(from, Replay{std::vector<uint64_t>(layout_.count, 0), std::vector<uint64_t>(layout_.count, 1),
                                      std::vector<uint64_t>(layout_.count, 0), SourceStats{}}).first;
  }
  return it->second;
}

bool MasterEndpoint::Fresh(const Replay& r, uint32_t c, uint64_t seq) {
  const uint64_t high = r.high[c];
  if (seq > high) return true;
  const uint64_t back = high - seq;
  if (back >= 64) {
    Add(deltas_too_old_);
    return false;
  }
  if (r.seen[c] & (uint64_t{1} << back)) {
    Add(deltas_duplicate_);
    return false;
  }
  return true;
}

void MasterEndpoint::Mark(Replay& r, uint32_t c, uint64_t seq) {
  uint64_t& high = r.high[c];
  uint64_t& seen = r.seen[c];
  if (seq > high) {
    const uint64_t shift = seq - high;
    seen = shift >= 64 ? 1 : (seen << shift) | 1;
    high = seq;
  } else {
    seen |= uint64_t{1} << (high - seq);
  }
}

ChunkUpdates::ChunkUpdates(uint32_t count, std::vector<int> classes)
    : n_(new std::atomic<uint64_t>[count]()), count_(count), classes_(std::move(classes)) {
  int most = -1;
  for (int k : classes_) most = std::max(most, k);
  if (most >= 0) class_last_.reset(new std::atomic<uint64_t>[static_cast<size_t>(most + 1) * count]());
}

uint64_t MasterEndpoint::Count(PeerId source, Replay& r, uint32_t c) {
  const uint64_t now = rule_.updates->get(c);  // updates of chunk c so far, by every slave
  // The count just after this slave's previous delta (or its class's: a gsp group's).
  std::atomic<uint64_t>* group = rule_.updates->class_last(source, c);
  const uint64_t prev = group ? group->load(kRelaxed) : r.last_update[c];
  const uint64_t staleness = prev ? now - prev + 1 : 1;
  if (rule_.weedout && staleness > rule_.weedout) {
    r.last_update[c] = now;  // it reported: its next delta's staleness counts from here
    if (group) group->store(now, kRelaxed);
    Add(deltas_weeded_);
    return 0;
  }
  r.last_update[c] = rule_.updates->Bump(c);
  if (group) group->store(r.last_update[c], kRelaxed);
  return staleness;
}

bool MasterEndpoint::Acceptable(PeerId source, uint32_t c, const float* d, uint32_t len) {
  const DeltaCheck::Verdict v = check_.Check(c, d, w_ + layout_.offset(c), len, rule_.aggregate->absurd());
  if (v == DeltaCheck::kOk) return true;
  const Refusal why = v == DeltaCheck::kNonFinite ? Refusal::kNonFinite : Refusal::kAbsurd;
  Add(why == Refusal::kNonFinite ? refused_nonfinite_ : refused_absurd_);
  if (auto it = replay_.find(source); it != replay_.end()) ++it->second.figures.refused;
  if (on_refused_) on_refused_(source, c, why);
  return false;
}

bool MasterEndpoint::OnDelta(const Message& m) {
  const Header& h = m.h;
  const Encoding enc = rule_.codec.delta;
  if (h.kind != MsgKind::kDelta || h.encoding != enc || h.chunk >= layout_.count ||
      h.length != rule_.codec.Bytes(enc, layout_.length(h.chunk))) {
    Add(malformed_);
  } else if (h.epoch != epoch_) {
    Add(deltas_other_epoch_);  // its seq belongs to another incarnation's numbering
  } else if (h.seq == 0 || h.seq > seq_[h.chunk]) {
    Add(malformed_);  // answers a position never posted
  } else if (enc != Encoding::kFloat32 &&
             !rule_.codec.Decode(enc, m.payload, h.length, layout_.length(h.chunk), scratch_.data())) {
    Add(malformed_);  // checksummed, but not a payload of this codec
  } else if (Replay& from = Window(h.source); Fresh(from, h.chunk, h.seq)) {  // (a duplicate answers nothing twice)
    Answered(h.chunk, h.seq);
    const float* d = enc == Encoding::kFloat32 ? m.floats() : scratch_.data();
    const uint32_t len = layout_.length(h.chunk);
    // Its seq is marked only once its values pass: a refused delta (a forged one that came
    // first) must not make the real answer to the same position a duplicate.
    if (!Acceptable(h.source, h.chunk, d, len)) return false;
    Mark(from, h.chunk, h.seq);
    DeltaInfo info;
    info.source = h.source;
    info.chunk = h.chunk;
    info.staleness = Count(h.source, from, h.chunk);
    if (info.staleness == 0) return false;  // weeded out
    const uint64_t stale = clock_ > h.clock ? clock_ - h.clock : 0;
    info.age = stale;
    info.clock = clock_;
    const float weight = rule_.aggregate->Take(info, w_ + layout_.offset(h.chunk), d, len, access_);
    Add(weight_milli_, static_cast<uint64_t>(std::lround(weight * 1000)));
    Add(deltas_applied_);
    Add(staleness_sum_, stale);
    if (stale > staleness_max_.load(kRelaxed)) staleness_max_.store(stale, kRelaxed);
    ++from.figures.applied;
    from.figures.staleness_sum += stale;
    ++from.figures.staleness[StalenessBucket(stale)];
    return true;
  }
  return false;
}

size_t MasterEndpoint::PollDeltas() {
  size_t applied = 0;
  constexpr size_t kBatch = 16;
  Message batch[kBatch];
  for (size_t got; (got = t_->Poll(batch, kBatch)) > 0;) {
    for (size_t i = 0; i < got; ++i) applied += OnDelta(batch[i]);
    t_->Release(got);
  }
  return applied;
}

MasterEndpoint::Stats MasterEndpoint::stats() const {
  return {positions_sent_.load(kRelaxed), deltas_applied_.load(kRelaxed),
          deltas_duplicate_.load(kRelaxed), deltas_too_old_.load(kRelaxed), malformed_.load(kRelaxed) + wire_.malformed(),
          bytes_sent_.load(kRelaxed),       sweeps_.load(kRelaxed),         unanswered_.load(kRelaxed),
          deltas_other_epoch_.load(kRelaxed), staleness_sum_.load(kRelaxed), staleness_max_.load(kRelaxed),
          deltas_weeded_.load(kRelaxed), weight_milli_.load(kRelaxed), refused_nonfinite_.load(kRelaxed),
          refused_absurd_.load(kRelaxed)};
}

void MasterEndpoint::SourceStats::Add(const SourceStats& o) {
  applied += o.applied;
  refused += o.refused;
  staleness_sum += o.staleness_sum;
  for (size_t b = 0; b < kStalenessBuckets; ++b) staleness[b] += o.staleness[b];
}

std::vector<std::pair<PeerId, MasterEndpoint::SourceStats>> MasterEndpoint::source_stats() const {
  std::vector<std::pair<PeerId, SourceStats>> out;
  for (const auto& [from, r] : replay_) out.emplace_back(from, r.figures);
  return out;
}

// ---------------------------------------------------------------- SlaveEndpoint

SlaveEndpoint::SlaveEndpoint(float* slave, const ChunkLayout& layout, Transport* transport,
                             Access access)
    : w_(slave),
      layout_(layout),
      wire_(transport),
      access_(access),
      seq_(layout_.count, 0),
      epoch_(layout_.count, 0),
      clock_(layout_.count, 0),
      answers_(layout_.count, 0),
      retake_(layout_.count, 0),
      final_(layout_.count, 0),
      prev_owner_(layout_.count, kNoPeer),
      prev_epoch_(layout_.count, 0) {
  HS_REQUIRE(std::min<size_t>(layout_.chunk_floats, layout_.n) * sizeof(float) <= t_->caps().max_payload)
      << "chunk of " << std::min<size_t>(layout_.chunk_floats, layout_.n) << " floats exceeds the transport's "
      << t_->caps().max_payload << " bytes";
  const size_t bytes = (layout_.n * sizeof(float) + 63) / 64 * 64;
  last_.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
  if (!last_) throw std::bad_alloc();
  ReadChunk(slave, last_.get(), layout_.n, access_);
}

void SlaveEndpoint::FreeDelete::operator()(float* p) const { std::free(p); }

void SlaveEndpoint::set_codec(const Codec& codec) {
  CheckFits(codec, codec.delta, layout_, t_->caps().max_payload);
  codec_ = codec;
}

void SlaveEndpoint::set_owners(std::vector<PeerId> owners, PeerId self) {
  HS_REQUIRE(owners.size() == layout_.count)
      << "chunk owner table has " << owners.size() << " entries for " << layout_.count << " chunks";
  for (uint32_t c = 0; c < layout_.count; ++c) {
    if (!owners_.empty() && owners_[c] == owners[c]) continue;
    // A chunk that becomes this machine's takes its previous owner's final once (TakeFinal).
    prev_owner_[c] = owners[c] == self && !owners_.empty() ? owners_[c] : kNoPeer;
    prev_epoch_[c] = epoch_[c];
    seq_[c] = 0;  // a new owner numbers its positions afresh
    epoch_[c] = 0;
    final_[c] = 0;
    // A chunk this machine mastered: its values are the job's, nothing of them is progress
    // still to send (w - last = 0). What it did since its last position to the new owner is
    // lost, one sweep at most; counting its whole history again would be far worse.
    if (!owners_.empty() && owners_[c] == self_ && owners[c] != self)
      ReadChunk(w_ + layout_.offset(c), last_.get() + layout_.offset(c), layout_.length(c), access_);
  }
  owners_ = std::move(owners);
  self_ = self;
}

void SlaveEndpoint::ForgetOwner(PeerId peer) {
  for (uint32_t c = 0; c < layout_.count; ++c) {
    if (!owners_.empty() && owners_[c] != peer) continue;
    seq_[c] = 0;
    epoch_[c] = 0;
    final_[c] = 0;
  }
}

void SlaveEndpoint::set_min_epoch(PeerId peer, uint32_t floor) {
  if (peer >= min_epoch_.size()) min_epoch_.resize(static_cast<size_t>(peer) + 1, 0);
  min_epoch_[peer] = floor;
}

void SlaveEndpoint::RetakeAll() {
  retaking_ = 0;
  for (uint32_t c = 0; c < layout_.count; ++c) {
    retake_[c] = owners_.empty() || owners_[c] != self_;
    retaking_ += retake_[c];
  }
  chunks_heard_ = layout_.count - retaking_;
}

// Whether a position is one to drop unanswered, and why (counted): not a position of this
// layout and codec, not from that chunk's master, or not newer than the last one taken.
bool SlaveEndpoint::Malformed(const Message& m, MsgKind kind) {
  const uint32_t c = m.h.chunk;
  if (m.h.kind == kind && m.h.encoding == codec_.position && c < layout_.count &&
      m.h.length == codec_.Bytes(codec_.position, layout_.length(c)))
    return false;
  Add(malformed_);
  return true;
}

bool SlaveEndpoint::Dropped(const Message& m, MsgKind kind) {
  const uint32_t c = m.h.chunk;
  if (Malformed(m, kind)) return true;
  if (!owners_.empty() && (owners_[c] != m.h.source || owners_[c] == self_)) {
    Add(positions_foreign_);  // not that chunk's master, or our own chunk
    return true;
  }
  if (m.h.epoch < epoch_[c] || (m.h.epoch == epoch_[c] && m.h.seq <= seq_[c]) ||
      (m.h.source < min_epoch_.size() && m.h.epoch < min_epoch_[m.h.source])) {
    Add(positions_stale_);  // a duplicate, overtaken by a newer position, an old master's, or
    return true;            // of a run of its sender that is not the one proven
  }
  return false;
}

// The position's values (decoded into pos_ where the codec compresses), or nullptr when they
// are no payload of the codec or not finite (counted, and the refusal reported).
const float* SlaveEndpoint::PositionValues(const Message& m, uint32_t len) {
  const float* pos = m.floats();
  if (codec_.position != Encoding::kFloat32) {
    pos_.resize(layout_.chunk_floats);
    if (!codec_.Decode(codec_.position, m.payload, m.h.length, len, pos_.data())) {
      Add(malformed_);  // checksummed, but not a payload of this codec
      return nullptr;
    }
    pos = pos_.data();
  }
  if (!std::isfinite(SumSquares(pos, len))) {
    Add(positions_refused_);
    if (on_refused_) on_refused_(m.h.source, m.h.chunk, Refusal::kNonFinite);
    return nullptr;
  }
  return pos;
}

// A lost copy's chunk c takes `pos` whole (w = last = pos): no longer to be re-taken.
void SlaveEndpoint::TakeWhole(uint32_t c, size_t off, uint32_t len, const float* pos) {
  for (uint32_t i = 0; i < len; ++i) {
    if (access_ == Access::kPlain) w_[off + i] = pos[i];
    else Store(w_[off + i], pos[i]);
  }
  std::memcpy(last_.get() + off, pos, len * sizeof(float));
  retake_[c] = 0;
  --retaking_;
}

// The rule for chunk c at `off` (len floats) against the position `pos`: this copy's progress
// into `slot` as the delta (encoded), and the copy caught up with the position. A copy being
// retaken takes the position whole and sends no progress; easgd's elastic pull sends the pull.
void SlaveEndpoint::WriteDelta(uint32_t c, size_t off, uint32_t len, const float* pos, std::byte* slot) {
  if (retake_[c]) {  // this copy was lost: the position whole, and no progress to send
    TakeWhole(c, off, len, pos);
    if (codec_.delta == Encoding::kFloat32) {
      std::memset(slot, 0, len * sizeof(float));
    } else {
      delta_.assign(layout_.chunk_floats, 0.f);
      codec_.Encode(codec_.delta, delta_.data(), len, slot);
    }
  } else if (elastic_ > 0) {
    delta_.resize(layout_.chunk_floats);
    float* w = w_ + off;
    for (uint32_t i = 0; i < len; ++i) delta_[i] = elastic_ * ((access_ == Access::kPlain ? w[i] : Load(w[i])) - pos[i]);
    codec_.Encode(codec_.delta, delta_.data(), len, slot);  // what the centre will get
    for (uint32_t i = 0; i < len; ++i) {
      if (access_ == Access::kPlain) w[i] -= delta_[i];
      else Store(w[i], Load(w[i]) - delta_[i]);
    }
  } else if (!codec_.compresses()) {
    float* out = reinterpret_cast<float*>(slot);
    if (access_ == Access::kPlain) {
      SlaveRulePlain(w_ + off, last_.get() + off, pos, out, len);
    } else {
      SlaveRuleAtomic(w_ + off, last_.get() + off, pos, out, len);
    }
  } else {
    delta_.resize(layout_.chunk_floats);
    SlaveProgress(w_ + off, last_.get() + off, delta_.data(), len, access_);
    codec_.Encode(codec_.delta, delta_.data(), len, slot);  // delta_ = what the master will add
    SlaveCatchUp(w_ + off, last_.get() + off, pos, delta_.data(), len, access_);
  }
}

bool SlaveEndpoint::Answer(const Message& m) {
  if (Dropped(m)) return true;
  const uint32_t c = m.h.chunk;
  const size_t off = layout_.offset(c);
  const uint32_t len = layout_.length(c);
  const float* pos = PositionValues(m, len);
  if (!pos) return true;
  // Answer a position only when its delta has a slot to go into: back-pressure, never a drop.
  std::byte* slot = t_->AcquireSend();
  if (!slot) return false;
  if (answers_[c] == 0 || retake_[c]) ++chunks_heard_;
  WriteDelta(c, off, len, pos, slot);
  Header h;
  h.kind = MsgKind::kDelta;
  h.encoding = codec_.delta;
  h.length = static_cast<uint32_t>(codec_.Bytes(codec_.delta, len));
  h.chunk = c;
  h.seq = m.h.seq;
  h.epoch = m.h.epoch;
  // The progress in this delta was made on weights from the previous position on (or this
  // one's, for the first): its clock is what the master's staleness is measured from.
  h.clock = epoch_[c] ? clock_[c] : m.h.clock;
  seq_[c] = m.h.seq;
  epoch_[c] = m.h.epoch;
  clock_[c] = m.h.clock;
  ++answers_[c];
  t_->CommitSend(Dest::Peer(m.h.source), h);
  Add(positions_applied_);
  Add(bytes_sent_, h.length);
  return true;
}

bool SlaveEndpoint::TakeFinal(const Message& m) {
  const uint32_t c = m.h.chunk;
  const bool handed = c < layout_.count && !owners_.empty() && owners_[c] == self_ && prev_owner_[c] != kNoPeer &&
                      m.h.source == prev_owner_[c];
  if (handed) {  // this machine's now: its previous owner's final, once and no older than its last position
    if (Malformed(m, MsgKind::kFinal)) return false;
    if (m.h.epoch < prev_epoch_[c] || (m.h.source < min_epoch_.size() && m.h.epoch < min_epoch_[m.h.source])) {
      Add(positions_stale_);
      return false;
    }
  } else if (Dropped(m, MsgKind::kFinal)) {
    return false;
  }
  const size_t off = layout_.offset(c);
  const uint32_t len = layout_.length(c);
  const float* pos = PositionValues(m, len);
  if (!pos) return false;
  if (retake_[c]) {  // a lost copy takes the values whole
    TakeWhole(c, off, len, pos);
    ++chunks_heard_;
  } else if (elastic_ == 0) {  // (easgd's copy is its own: the centre is the master's alone)
    delta_.assign(len, 0.f);  // the rule's catch-up with nothing sent: w += final - last, last = final
    SlaveCatchUp(w_ + off, last_.get() + off, pos, delta_.data(), len, access_);
  }
  if (handed) {
    prev_owner_[c] = kNoPeer;  // once
    return true;
  }
  seq_[c] = m.h.seq;
  epoch_[c] = m.h.epoch;
  clock_[c] = m.h.clock;
  final_[c] = 1;
  return true;
}

uint32_t SlaveEndpoint::finals_from(PeerId peer) const {
  uint32_t n = 0;
  for (uint32_t c = 0; c < layout_.count; ++c) n += final_[c] && !owners_.empty() && owners_[c] == peer;
  return n;
}

size_t SlaveEndpoint::PollPositions() {
  size_t answered = 0;
  for (;;) {
    if (next_ == polled_) {  // take a batch (one recvmmsg, one ring pass)
      if (polled_) t_->Release(polled_);
      next_ = polled_ = 0;
      polled_ = t_->Poll(batch_, kBatch);
      if (polled_ == 0) break;
    }
    // With every slot queued, hand them to the wire and try once more; else the rest of the
    // batch stays held for the next call.
    const uint64_t before = positions_applied_.load(kRelaxed);
    if (!Answer(batch_[next_])) {
      t_->Flush();
      if (!Answer(batch_[next_])) break;
    }
    ++next_;
    answered += positions_applied_.load(kRelaxed) - before;
  }
  t_->Flush();  // also whatever a decorator or an earlier call left queued
  return answered;
}

SlaveEndpoint::Stats SlaveEndpoint::stats() const {
  return {positions_applied_.load(kRelaxed), positions_stale_.load(kRelaxed), malformed_.load(kRelaxed) + wire_.malformed(),
          bytes_sent_.load(kRelaxed), positions_foreign_.load(kRelaxed), positions_refused_.load(kRelaxed)};
}

bool TakeData(const Message& m, SlaveEndpoint& slave, MasterEndpoint* master, Wire& t) {
  if (m.h.kind == MsgKind::kPosition) {
    if (slave.Answer(m)) return true;
    t.Flush();
    return slave.Answer(m);
  }
  if (m.h.kind == MsgKind::kDelta && master) master->OnDelta(m);
  return true;
}

}  // namespace hogstream
