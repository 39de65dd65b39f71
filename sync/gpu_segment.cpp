#include "sync/gpu_segment.hpp"

#include <algorithm>
#include <cstring>

#include "base/common.hpp"
#include "core/context.hpp"

namespace hogstream {

namespace {
// The master's values of now in pinned memory (so that copies from it are asynchronous), freed
// with it: the caller waits for the copies that read it first.
struct PinnedSnapshot {
  PinnedSnapshot(DeviceApi& api, const float* master, size_t n)
      : api(api), values(static_cast<float*>(api.AllocPinned(n * sizeof(float)))) {
    std::memcpy(values, master, n * sizeof(float));
  }
  ~PinnedSnapshot() { api.FreePinned(values); }
  PinnedSnapshot(const PinnedSnapshot&) = delete;
  PinnedSnapshot& operator=(const PinnedSnapshot&) = delete;
  DeviceApi& api;
  float* values;
};
}  // namespace

GpuSegment::GpuSegment(DeviceApi& api, float* master, float* device_w, size_t n, GpuSegmentOptions options)
    : api_(api), master_(master), w_(device_w), n_(n), opt_(options) {
  HS_REQUIRE(n > 0 && master && device_w) << "a GPU segment needs weights on both sides";
  HS_REQUIRE(opt_.chunk_floats > 0 && opt_.slots > 0) << "a GPU segment needs chunks and slots";
  const size_t count = (n + opt_.chunk_floats - 1) / opt_.chunk_floats;
  HS_REQUIRE(count <= UINT32_MAX) << "a GPU segment of " << count << " chunks";
  count_ = static_cast<uint32_t>(count);
  in_flight_.assign(count_, 0);
  last_update_.assign(count_, 0);
  check_ = DeltaCheck(count_);
  if (!opt_.aggregate) opt_.aggregate = DefaultAggregate();
  if (opt_.aggregate->stateful()) opt_.aggregate->Bind(n_, count_);
  HS_REQUIRE(!opt_.updates || opt_.updates->count() == count_)
      << "a GPU segment of " << count_ << " chunks counting updates of " << opt_.updates->count();
  stream_ = api_.CreateStream();
  last_ = static_cast<float*>(api_.Alloc(n * sizeof(float)));
  // w = last = one snapshot of the master.
  const PinnedSnapshot snapshot(api_, master_, n);
  api_.CopyAsync(w_, snapshot.values, n * sizeof(float), CopyKind::kHostToDevice, stream_);
  api_.CopyAsync(last_, snapshot.values, n * sizeof(float), CopyKind::kHostToDevice, stream_);
  slots_.resize(std::min<size_t>(opt_.slots, count_));
  const size_t bytes = static_cast<size_t>(opt_.chunk_floats) * sizeof(float);
  for (Slot& s : slots_) {
    s.pos_h = static_cast<float*>(api_.AllocPinned(bytes));
    s.delta_h = static_cast<float*>(api_.AllocPinned(bytes));
    s.pos_d = static_cast<float*>(api_.Alloc(bytes));
    s.delta_d = static_cast<float*>(api_.Alloc(bytes));
    s.done = api_.CreateEvent();
  }
  solver_done_ = api_.CreateEvent();
  swapped_ = api_.CreateEvent();
  refilled_ = std::chrono::steady_clock::now();
  api_.Synchronize(stream_);  // the device copy is the solver's from here (and the snapshot may go)
}

GpuSegment::~GpuSegment() {
  Stop();
  api_.Synchronize(stream_);  // nothing of ours runs when the buffers go
  for (Slot& s : slots_) {
    Complete(s);  // (a delta that came back is not lost)
    api_.DestroyEvent(s.done);
    api_.FreePinned(s.pos_h);
    api_.FreePinned(s.delta_h);
    api_.Free(s.pos_d);
    api_.Free(s.delta_d);
  }
  api_.DestroyEvent(solver_done_);
  api_.DestroyEvent(swapped_);
  api_.Free(last_);
  if (saved_) api_.Free(saved_);
  api_.DestroyStream(stream_);
}

uint32_t GpuSegment::length(uint32_t c) const {
  return static_cast<uint32_t>(std::min<size_t>(opt_.chunk_floats, n_ - offset(c)));
}

bool GpuSegment::Complete(Slot& s) {
  if (s.state != State::kInFlight || !api_.Query(s.done)) return false;
  // The delta is in pinned memory now (the event follows its copy on the stream).
  float* m = master_ + offset(s.chunk);
  const uint32_t len = length(s.chunk);
  // A delta with an element that is not finite (the copy diverged), or absurd, is not taken:
  // the master stays sound for the copy to re-take (Retake), as a CPU master refuses one.
  if (check_.Check(s.chunk, s.delta_h, m, len, opt_.aggregate->absurd()) != DeltaCheck::kOk) {
    refused_.fetch_add(1, std::memory_order_relaxed);
  } else {
    DeltaInfo info;
    info.chunk = s.chunk;
    if (opt_.updates) {
      const uint64_t now = opt_.updates->get(s.chunk);
      const uint64_t prev = last_update_[s.chunk];
      info.staleness = prev ? now - prev + 1 : 1;
      last_update_[s.chunk] = opt_.updates->Bump(s.chunk);
    }
    const float weight = opt_.aggregate->Take(info, m, s.delta_h, len, Access::kPlain);
    if (weight < 1) weighted_.fetch_add(1, std::memory_order_relaxed);
  }
  s.state = State::kFree;
  in_flight_[s.chunk] = 0;
  in_flight_count_.fetch_sub(1, std::memory_order_release);
  if ((chunks_done_.fetch_add(1, std::memory_order_relaxed) + 1) % count_ == 0) swept_.Tell();
  return true;
}

void GpuSegment::Issue(Slot& s, uint32_t c) {
  const uint32_t len = length(c);
  const size_t bytes = len * sizeof(float);
  std::memcpy(s.pos_h, master_ + offset(c), bytes);  // the position: the master's values now
  api_.CopyAsync(s.pos_d, s.pos_h, bytes, CopyKind::kHostToDevice, stream_);
  api_.LaunchSlaveRule(len, s.pos_d, w_ + offset(c), last_ + offset(c), s.delta_d, stream_);
  api_.CopyAsync(s.delta_h, s.delta_d, bytes, CopyKind::kDeviceToHost, stream_);
  api_.Record(s.done, stream_);
  s.state = State::kInFlight;
  s.chunk = c;
  in_flight_[c] = 1;
  in_flight_count_.fetch_add(1, std::memory_order_relaxed);
  bytes_.fetch_add(2 * bytes, std::memory_order_relaxed);
}

bool GpuSegment::Budget(size_t bytes) {
  if (opt_.max_bytes_per_s <= 0) return true;
  const auto now = std::chrono::steady_clock::now();
  // A bucket of a tenth of a second's bytes (at least one chunk's), refilled at the cap's rate.
  const double burst = std::max(opt_.max_bytes_per_s / 10, 2.0 * opt_.chunk_floats * sizeof(float));
  tokens_ = std::min(burst, tokens_ + std::chrono::duration<double>(now - refilled_).count() * opt_.max_bytes_per_s);
  refilled_ = now;
  if (tokens_ < static_cast<double>(bytes)) return false;
  tokens_ -= static_cast<double>(bytes);
  return true;
}

bool GpuSegment::Step() {
  std::lock_guard<std::mutex> turn(step_mu_);
  bool moved = false;
  for (Slot& s : slots_) moved |= Complete(s);
  for (Slot& s : slots_) {
    if (s.state != State::kFree || paused_.load(std::memory_order_acquire)) continue;
    // The next chunk not in flight (none is, unless every slot's chunk is ahead of it).
    uint32_t c = next_;
    for (uint32_t tries = 0; tries < count_ && in_flight_[c]; ++tries) c = (c + 1) % count_;
    if (in_flight_[c]) break;
    if (!Budget(2 * length(c) * sizeof(float))) {
      capped_.fetch_add(1, std::memory_order_relaxed);
      break;
    }
    Issue(s, c);
    next_ = (c + 1) % count_;
    moved = true;
  }
  return moved;
}

void GpuSegment::Run() {
  while (!quit_.load(std::memory_order_relaxed))
    if (!Step()) std::this_thread::sleep_for(std::chrono::microseconds(opt_.idle_us));
}

void GpuSegment::Start() {
  if (thread_.joinable()) return;
  quit_.store(false);
  thread_ = std::thread([this] {
    NameThisThread("hs-gpu-segment");
    Run();
  });
}

void GpuSegment::Stop() {
  if (!thread_.joinable()) return;
  quit_.store(true);
  thread_.join();
}

void GpuSegment::Drain() {
  while (in_flight_count_.load(std::memory_order_acquire) > 0) {
    api_.Synchronize(stream_);
    for (Slot& s : slots_) Complete(s);
  }
}

void GpuSegment::Sweep() {
  std::lock_guard<std::mutex> turn(step_mu_);  // (a daemon's Steps wait meanwhile)
  // Whatever is in flight lands first; then each chunk once, in order, as slots free up.
  Drain();
  for (uint32_t c = 0; c < count_;) {
    Slot* free = nullptr;
    for (Slot& s : slots_)
      if (s.state == State::kFree) free = &s;
    if (!free) {
      api_.Synchronize(stream_);
      for (Slot& s : slots_) Complete(s);
      continue;
    }
    Issue(*free, c++);
  }
  Drain();
}

void GpuSegment::Quiesce() {
  paused_.store(true, std::memory_order_release);
  std::lock_guard<std::mutex> turn(step_mu_);  // (a daemon's Steps meanwhile take nothing new)
  Drain();
}

void GpuSegment::InTurn(StreamId solver, const std::function<void()>& swap) {
  api_.Record(solver_done_, solver);
  api_.WaitEvent(stream_, solver_done_);
  swap();
  api_.Record(swapped_, stream_);
  api_.WaitEvent(solver, swapped_);
}

void GpuSegment::RunOnMaster(StreamId solver, const std::function<void()>& f) {
  Quiesce();
  master_runs_.fetch_add(1, std::memory_order_relaxed);
  const size_t bytes = n_ * sizeof(float);
  if (!saved_) saved_ = static_cast<float*>(api_.Alloc(bytes));
  {
    const PinnedSnapshot snapshot(api_, master_, n_);
    InTurn(solver, [&] {
      api_.CopyAsync(saved_, w_, bytes, CopyKind::kDeviceToDevice, stream_);
      api_.CopyAsync(w_, snapshot.values, bytes, CopyKind::kHostToDevice, stream_);
    });
    api_.Synchronize(stream_);  // (the snapshot may go)
  }
  auto restore = [&] {
    InTurn(solver, [&] { api_.CopyAsync(w_, saved_, bytes, CopyKind::kDeviceToDevice, stream_); });
    paused_.store(false, std::memory_order_release);  // (our next work follows the restore on our stream)
  };
  try {
    f();
  } catch (...) {
    restore();
    throw;
  }
  restore();
}

bool GpuSegment::Retake(StreamId solver) {
  Quiesce();
  const size_t bytes = n_ * sizeof(float);
  const PinnedSnapshot snapshot(api_, master_, n_);
  const bool sound = AllFinite(snapshot.values, n_);
  if (sound) {
    InTurn(solver, [&] {
      api_.CopyAsync(w_, snapshot.values, bytes, CopyKind::kHostToDevice, stream_);
      api_.CopyAsync(last_, snapshot.values, bytes, CopyKind::kHostToDevice, stream_);
    });
    api_.Synchronize(stream_);
    retakes_.fetch_add(1, std::memory_order_relaxed);
  }
  paused_.store(false, std::memory_order_release);
  return sound;
}

bool GpuSegment::AwaitSweeps(uint64_t sweeps, std::chrono::milliseconds limit) {
  const uint64_t want = stats().sweeps + sweeps;
  return swept_.Await([&] { return stats().sweeps >= want; }, std::chrono::steady_clock::now() + limit);
}

GpuSegmentStats GpuSegment::stats() const {
  GpuSegmentStats s;
  s.chunks = chunks_done_.load(std::memory_order_relaxed);
  s.sweeps = s.chunks / count_;
  s.bytes = bytes_.load(std::memory_order_relaxed);
  s.capped = capped_.load(std::memory_order_relaxed);
  s.master_runs = master_runs_.load(std::memory_order_relaxed);
  s.weighted = weighted_.load(std::memory_order_relaxed);
  s.refused = refused_.load(std::memory_order_relaxed);
  s.retakes = retakes_.load(std::memory_order_relaxed);
  return s;
}

GpuCopies::GpuCopies(DeviceApi& api, float* master, size_t n, GpuSegmentOptions options)
    : api_(api), master_(master), n_(n), opt_(options) {}

GpuCopies::~GpuCopies() {
  Stop();
  for (auto& c : copies_) {
    c->segment.reset();  // (its work done before its buffers go)
    api_.Free(c->w);
  }
}

int GpuCopies::Add() {
  HS_CHECK(!thread_.joinable()) << "GpuCopies::Add while the daemon runs";
  auto c = std::make_unique<Copy>();
  c->w = static_cast<float*>(api_.Alloc(n_ * sizeof(float)));
  try {
    c->segment = std::make_unique<GpuSegment>(api_, master_, c->w, n_, opt_);
  } catch (...) {
    api_.Free(c->w);
    throw;
  }
  std::lock_guard<std::mutex> lock(mu_);
  copies_.push_back(std::move(c));
  return static_cast<int>(copies_.size()) - 1;
}

void GpuCopies::Run() {
  while (!quit_.load(std::memory_order_relaxed)) {
    bool moved = false;
    for (auto& c : copies_)
      if (!c->finished.load(std::memory_order_acquire)) moved |= c->segment->Step();
    if (!moved) std::this_thread::sleep_for(std::chrono::microseconds(opt_.idle_us));
  }
}

void GpuCopies::Start() {
  if (thread_.joinable()) return;
  quit_.store(false);
  thread_ = std::thread([this] {
    NameThisThread("hs-gpu-copies");
    Run();
  });
}

void GpuCopies::Stop() {
  if (!thread_.joinable()) return;
  quit_.store(true);
  thread_.join();
}

void GpuCopies::Finish(int k) {
  Copy& c = *copies_[k];
  c.finished.store(true, std::memory_order_release);
  c.segment->Sweep();  // (a Step of the daemon's under way ends first: the sweep holds the turn)
}

std::vector<GpuSegmentStats> GpuCopies::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<GpuSegmentStats> out;
  for (const auto& c : copies_) out.push_back(c->segment->stats());
  return out;
}

}  // namespace hogstream
