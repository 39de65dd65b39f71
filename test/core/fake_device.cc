#include "test/core/fake_device.hpp"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "base/common.hpp"
#include "core/slave_rule.hpp"

namespace hogstream::test {

FakeDevice::FakeDevice(FakeDeviceOptions options) : opt_(options) {}

FakeDevice::~FakeDevice() {
  std::vector<StreamId> ids;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, s] : streams_) ids.push_back(id);
  }
  for (StreamId id : ids) DestroyStream(id);
  for (auto& [p, bytes] : device_) std::free(const_cast<char*>(p));
  for (auto& [p, bytes] : pinned_) std::free(const_cast<char*>(p));
}

double FakeDevice::Now() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }

void FakeDevice::Fail(const std::string& what) { errors_.push_back(what); }

std::vector<std::string> FakeDevice::errors() const {
  std::lock_guard<std::mutex> lock(mu_);
  return errors_;
}

std::vector<FakeDevice::Span> FakeDevice::timeline() const {
  std::lock_guard<std::mutex> lock(mu_);
  return timeline_;
}

size_t FakeDevice::device_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& [p, bytes] : device_) n += bytes;
  return n;
}

void* FakeDevice::Alloc(size_t bytes) {
  // Poisoned: a kernel or copy that reads what nobody wrote sees NaN.
  const size_t floats = (bytes + sizeof(float) - 1) / sizeof(float);
  auto* p = static_cast<float*>(std::aligned_alloc(256, std::max<size_t>(256, (floats * sizeof(float) + 255) / 256 * 256)));
  HS_REQUIRE(p) << "fake device: out of memory for " << bytes << " bytes";
  for (size_t i = 0; i < floats; ++i) p[i] = std::numeric_limits<float>::quiet_NaN();
  std::lock_guard<std::mutex> lock(mu_);
  device_[reinterpret_cast<const char*>(p)] = bytes;
  return p;
}

void FakeDevice::Give(std::map<const char*, size_t>& table, void* p, const char* misuse) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!p) return;
  if (table.erase(static_cast<const char*>(p)) == 0) {
    Fail(misuse);
    return;
  }
  std::free(p);
}

void FakeDevice::Free(void* p) { Give(device_, p, "Free of memory the device did not allocate"); }

void* FakeDevice::AllocPinned(size_t bytes) {
  void* p = std::aligned_alloc(64, std::max<size_t>(64, (bytes + 63) / 64 * 64));
  HS_REQUIRE(p) << "fake device: out of pinned memory for " << bytes << " bytes";
  std::lock_guard<std::mutex> lock(mu_);
  pinned_[static_cast<const char*>(p)] = bytes;
  return p;
}

void FakeDevice::FreePinned(void* p) { Give(pinned_, p, "FreePinned of memory not from AllocPinned"); }

FakeDevice::Kind FakeDevice::KindOf(const void* p, size_t bytes) const {
  const char* c = static_cast<const char*>(p);
  for (const auto* table : {&device_, &pinned_}) {
    auto it = table->upper_bound(c);
    if (it == table->begin()) continue;
    --it;
    if (c >= it->first && c + bytes <= it->first + it->second) return table == &device_ ? Kind::kDevice : Kind::kPinned;
  }
  return Kind::kHost;
}

StreamId FakeDevice::CreateStream() {
  std::lock_guard<std::mutex> lock(mu_);
  const StreamId id = next_stream_++;
  auto s = std::make_unique<Stream>();
  s->rng.seed(opt_.seed * 7919u + id);
  Stream* raw = s.get();
  streams_[id] = std::move(s);
  raw->worker = std::thread([this, id, raw] { Work(id, raw); });
  return id;
}

StreamId FakeDevice::CurrentStream() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = current_.find(std::this_thread::get_id());
    if (it != current_.end()) return it->second;
  }
  const StreamId id = CreateStream();
  std::lock_guard<std::mutex> lock(mu_);
  current_[std::this_thread::get_id()] = id;
  return id;
}

void FakeDevice::DestroyStream(StreamId id) {
  std::unique_ptr<Stream> s;
  {
    std::unique_lock<std::mutex> lock(mu_);
    auto it = streams_.find(id);
    if (it == streams_.end()) {
      Fail("DestroyStream of an unknown stream");
      return;
    }
    it->second->stalled = false;
    cv_.wait(lock, [&] { return it->second->queue.empty() && !it->second->busy; });
    it->second->quit = true;
    cv_.notify_all();
    s = std::move(it->second);
    streams_.erase(it);
  }
  s->worker.join();
}

EventId FakeDevice::CreateEvent() {
  std::lock_guard<std::mutex> lock(mu_);
  const EventId id = next_event_++;
  events_[id] = Event{};
  return id;
}

void FakeDevice::DestroyEvent(EventId e) {
  std::lock_guard<std::mutex> lock(mu_);
  if (events_.erase(e) == 0) Fail("DestroyEvent of an unknown event");
}

void FakeDevice::Enqueue(StreamId id, Op op) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = streams_.find(id);
  if (it == streams_.end()) {
    Fail("work queued on unknown stream " + std::to_string(id));
    return;
  }
  it->second->queue.push_back(std::move(op));
  cv_.notify_all();
}

void FakeDevice::Work(StreamId id, Stream* s) {
  // `s` outlives this thread (DestroyStream joins it before the stream goes), even once it has
  // left streams_.
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    // The next op may start when the stream is not stalled and the event it waits for (if
    // any) has completed.
    cv_.wait(lock, [&] {
      if (s->quit) return true;
      if (s->stalled || s->queue.empty()) return false;
      const Op& op = s->queue.front();
      if (!op.wait) return true;
      auto e = events_.find(op.wait);
      return e == events_.end() || e->second.completed >= op.generation;
    });
    if (s->quit) return;
    Op op = std::move(s->queue.front());
    s->queue.pop_front();
    s->busy = true;
    const auto delay = opt_.max_delay.count() > 0
                           ? std::chrono::microseconds(std::uniform_int_distribution<int64_t>(0, opt_.max_delay.count())(s->rng))
                           : std::chrono::microseconds(0);
    lock.unlock();
    if (delay.count() > 0) std::this_thread::sleep_for(delay);
    const double start = Now();
    if (op.run) {
      if (op.kernel && opt_.serial_kernels) {
        std::lock_guard<std::mutex> k(kernel_mu_);
        op.run();
      } else {
        op.run();
      }
    }
    const double end = Now();
    lock.lock();
    if (op.record) {
      auto e = events_.find(op.record);
      if (e != events_.end()) e->second.completed = std::max(e->second.completed, op.generation);
    }
    timeline_.push_back(Span{op.what, id, start, end});
    s->busy = false;
    cv_.notify_all();
  }
}

void FakeDevice::CopyAsync(void* dst, const void* src, size_t bytes, CopyKind kind, StreamId s) {
  bool blocking = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const Kind d = KindOf(dst, bytes), from = KindOf(src, bytes);
    const bool ok = kind == CopyKind::kHostToDevice   ? d == Kind::kDevice && from != Kind::kDevice
                    : kind == CopyKind::kDeviceToHost ? from == Kind::kDevice && d != Kind::kDevice
                                                      : d == Kind::kDevice && from == Kind::kDevice;
    if (!ok) {
      Fail(std::string("CopyAsync ") + (kind == CopyKind::kHostToDevice   ? "H2D"
                                        : kind == CopyKind::kDeviceToHost ? "D2H"
                                                                          : "D2D") +
           " with a pointer of the wrong kind");
      return;
    }
    const Kind host = kind == CopyKind::kHostToDevice ? from : d;
    blocking = kind != CopyKind::kDeviceToDevice && host == Kind::kHost;
  }
  const char* what = kind == CopyKind::kHostToDevice ? "H2D" : kind == CopyKind::kDeviceToHost ? "D2H" : "D2D";
  if (blocking) {
    // Pageable memory: the copy runs once the stream's earlier work has, and the call returns
    // after it (CUDA stages it through its own buffer; the caller waits either way).
    blocking_copies_.fetch_add(1);
    Synchronize(s);
    const double start = Now();
    std::memcpy(dst, src, bytes);
    std::lock_guard<std::mutex> lock(mu_);
    timeline_.push_back(Span{std::string(what) + " (blocking)", s, start, Now()});
    return;
  }
  Op op;
  op.what = what;
  op.run = [dst, src, bytes] { std::memcpy(dst, src, bytes); };
  Enqueue(s, std::move(op));
}

void FakeDevice::LaunchSlaveRule(size_t n, const float* pos, float* w, float* last, float* delta, StreamId s) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    const size_t bytes = n * sizeof(float);
    if (KindOf(pos, bytes) != Kind::kDevice || KindOf(w, bytes) != Kind::kDevice ||
        KindOf(last, bytes) != Kind::kDevice || KindOf(delta, bytes) != Kind::kDevice) {
      Fail("LaunchSlaveRule with a pointer that is not device memory");
      return;
    }
  }
  Op op;
  op.what = "rule";
  op.kernel = true;
  op.run = [=] {
    for (size_t i = 0; i < n; ++i) SlaveRuleStep(pos[i], w[i], last[i], delta[i]);
  };
  Enqueue(s, std::move(op));
}

void FakeDevice::Launch(StreamId s, const char* what, std::function<void()> body) {
  Op op;
  op.what = what;
  op.kernel = true;
  op.run = std::move(body);
  Enqueue(s, std::move(op));
}

void FakeDevice::Record(EventId e, StreamId s) {
  Op op;
  op.what = "record";
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = events_.find(e);
    if (it == events_.end()) {
      Fail("Record of an unknown event");
      return;
    }
    op.record = e;
    op.generation = ++it->second.recorded;
  }
  Enqueue(s, std::move(op));
}

bool FakeDevice::Query(EventId e) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = events_.find(e);
  if (it == events_.end()) {
    Fail("Query of an unknown event");
    return true;
  }
  return it->second.completed >= it->second.recorded;
}

void FakeDevice::WaitEvent(StreamId s, EventId e) {
  Op op;
  op.what = "wait";
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = events_.find(e);
    if (it == events_.end()) {
      Fail("WaitEvent on an unknown event");
      return;
    }
    op.wait = e;
    op.generation = it->second.recorded;
  }
  Enqueue(s, std::move(op));
}

void FakeDevice::Synchronize(StreamId id) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = streams_.find(id);
  if (it == streams_.end()) {
    Fail("Synchronize of an unknown stream");
    return;
  }
  Stream* s = it->second.get();
  cv_.wait(lock, [&] { return s->queue.empty() && !s->busy; });
}

void FakeDevice::Stall(StreamId id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = streams_.find(id);
  if (it != streams_.end()) it->second->stalled = true;
}

void FakeDevice::Release(StreamId id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = streams_.find(id);
  if (it != streams_.end()) it->second->stalled = false;
  cv_.notify_all();
}

}  // namespace hogstream::test
