// A CPU stand-in for a GPU runtime behind core/device_api.hpp, keeping CUDA's ordering
// semantics so that code above the seam (the GPU segment, the device data stream) is tested
// without a GPU, the way transport/verbs is tested against fake_verbs:
//   - each stream is a worker thread that runs its queue in order, asynchronously to the
//     caller; different streams run concurrently (their work interleaves in any order);
//   - an event completes when its stream's worker has reached it; WaitEvent makes a stream's
//     later work wait for it;
//   - a copy whose host side is not pinned (not from AllocPinned) runs on the caller's thread
//     once the stream's earlier work has run, and returns after the bytes moved (counted:
//     blocking_copies());
//   - device memory is host memory the fake allocated and poisons (NaN) at allocation; every
//     copy's and kernel's pointers are checked against the kind they must be (a device pointer
//     where one is due, host memory where host is), and a mistake is an ADD_FAILURE-style
//     record (errors()).
// To let races show, the fake can delay each operation by a random time (per stream, seeded),
// stall a stream until released, and run kernels serially (one at a time across streams: a
// schedule a GPU may choose, under which concurrent kernels' element writes cannot race) or
// concurrently. A timeline of what ran when (kind, stream, start and end) is kept for tests of
// overlap.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/device_api.hpp"

namespace hogstream::test {

struct FakeDeviceOptions {
  uint32_t seed = 1;
  // Each operation on a stream waits up to this long first (uniform; 0: no delay).
  std::chrono::microseconds max_delay{0};
  bool serial_kernels = true;  // kernels one at a time across streams (see above)
};

class FakeDevice : public DeviceApi {
 public:
  explicit FakeDevice(FakeDeviceOptions options = {});
  ~FakeDevice() override;

  const char* name() const override { return "fake device (CPU)"; }
  void* Alloc(size_t bytes) override;
  void Free(void* p) override;
  void* AllocPinned(size_t bytes) override;
  void FreePinned(void* p) override;
  StreamId CreateStream() override;
  void DestroyStream(StreamId s) override;
  // A stream per calling thread, made at its first call (the fake has no Contexts).
  StreamId CurrentStream() override;
  EventId CreateEvent() override;
  void DestroyEvent(EventId e) override;
  void CopyAsync(void* dst, const void* src, size_t bytes, CopyKind kind, StreamId s) override;
  void LaunchSlaveRule(size_t n, const float* pos, float* w, float* last, float* delta, StreamId s) override;
  void Record(EventId e, StreamId s) override;
  bool Query(EventId e) override;
  void WaitEvent(StreamId s, EventId e) override;
  void Synchronize(StreamId s) override;

  // A test's own kernel on stream s (a stand-in solver's update of device memory): runs `body`
  // on the stream's worker, under the kernels' rule (serial or not).
  void Launch(StreamId s, const char* what, std::function<void()> body);
  // Stream s runs nothing more until Release(s) (what is running finishes).
  void Stall(StreamId s);
  void Release(StreamId s);

  struct Span {
    std::string what;  // "H2D", "D2H", "D2D", "rule", a test kernel's name, "record", "wait"
    StreamId stream;
    double start, end;  // seconds since the fake was made
  };
  std::vector<Span> timeline() const;
  uint64_t blocking_copies() const { return blocking_copies_.load(); }
  // Misuse found (a host pointer where a device one is due, an unknown handle...): one line each.
  std::vector<std::string> errors() const;
  // Device bytes allocated now.
  size_t device_bytes() const;

 private:
  struct Op {
    std::string what;
    std::function<void()> run;
    bool kernel = false;
    EventId record = 0;  // this op completes event `record` (its generation below)
    uint64_t generation = 0;
    EventId wait = 0;    // this op waits for event `wait` to reach `generation`
  };
  struct Stream {
    std::deque<Op> queue;
    bool busy = false, stalled = false, quit = false;
    std::thread worker;
    std::mt19937 rng;
  };
  struct Event {
    uint64_t recorded = 0;   // generations handed out
    uint64_t completed = 0;  // generations reached
  };
  enum class Kind { kDevice, kPinned, kHost };

  void Enqueue(StreamId s, Op op);
  void Work(StreamId id, Stream* s);
  Kind KindOf(const void* p, size_t bytes) const;  // under mu_
  void Fail(const std::string& what);              // under mu_
  void Give(std::map<const char*, size_t>& table, void* p, const char* misuse);  // Free, FreePinned
  double Now() const;

  FakeDeviceOptions opt_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<StreamId, std::unique_ptr<Stream>> streams_;
  std::map<EventId, Event> events_;
  std::map<std::thread::id, StreamId> current_;
  std::map<const char*, size_t> device_, pinned_;  // start -> bytes
  StreamId next_stream_ = 1;
  EventId next_event_ = 1;
  std::mutex kernel_mu_;  // serial_kernels
  std::vector<Span> timeline_;
  std::vector<std::string> errors_;
  std::atomic<uint64_t> blocking_copies_{0};
  const std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

}  // namespace hogstream::test
