// Batches to the device ahead of their use, for a GPU solver's Data layer: each batch is staged
// in pinned host memory and copied to one of `depth` device buffers on the prefetcher's own
// stream, followed by an event. The consumer makes its compute stream wait for that event (its
// first kernel on the batch runs after the copy, and the host never waits), and hands the buffer
// back with an event recorded on its compute stream after its last use of it; the next copy into
// that buffer waits for that one. So batch k + 1 crosses the bus while batch k trains, and no
// copy overwrites a batch still in use.
//
// Threads: one owner (the solver's thread) calls everything. Built on core/device_api.hpp, so
// it runs on a GPU and, in the tests, on the CPU fake.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

#include "core/device_api.hpp"

namespace hogstream {

class DevicePrefetcher {
 public:
  // Batches of `batch_bytes`, `depth` (>= 2) of them on the device at most.
  DevicePrefetcher(DeviceApi& api, size_t batch_bytes, int depth = 2);
  ~DevicePrefetcher();
  DevicePrefetcher(const DevicePrefetcher&) = delete;
  DevicePrefetcher& operator=(const DevicePrefetcher&) = delete;

  // Whether Submit would take a batch now without waiting (a buffer is free and its staging
  // memory's last copy has left).
  bool CanSubmit();
  // Queues the copy of `batch` (host memory, batch_bytes): staged in pinned memory at once, so
  // the caller may reuse `batch` on return. The next buffer must not hold a batch not yet taken
  // or not yet Done (a Bug: take one with Next first); it waits only for that buffer's staging
  // memory's last copy to leave (CanSubmit says whether it would).
  void Submit(const void* batch);
  // The oldest batch submitted and not yet taken, on the device; `compute`'s later work waits
  // for its copy. An Error when none is queued.
  const void* Next(StreamId compute);
  // The consumer is done with the batch Next returned once `compute`'s work queued so far has
  // run: its buffer may take another batch after that.
  void Done(StreamId compute);

  size_t batch_bytes() const { return bytes_; }
  StreamId stream() const { return stream_; }

 private:
  struct Buffer {
    void* device = nullptr;
    void* staging = nullptr;  // pinned
    EventId copied = 0;       // the copy into `device` has run (so `staging` is free again)
    EventId released = 0;     // the consumer's last use of `device` has run
    bool queued = false;      // holds a batch not yet taken by Next
    bool in_use = false;      // taken by Next, not yet Done
  };

  DeviceApi& api_;
  size_t bytes_;
  StreamId stream_ = 0;
  std::vector<Buffer> buffers_;
  std::deque<int> ready_;  // buffers with a batch, oldest first
  int next_fill_ = 0;
  int taken_ = -1;         // the buffer Next handed out
};

// A Data layer's batches on the device, one call a Forward: Next hands out the current batch's
// device memory (the compute stream's later work waits for its copy) and, before returning,
// queues the copy of the batch after it, so that batch k + 1 crosses the bus while batch k
// trains. The batch Next handed out before is released after the work queued on the compute
// stream until this call (the last iteration's backward included). Batches are filled in the
// order they train, one ahead: the same sequence as on the host.
class DeviceBatches {
 public:
  DeviceBatches(DeviceApi& api, size_t batch_bytes) : pre_(api, batch_bytes, 2), host_(batch_bytes) {}
  // `fill` writes one batch (batch_bytes) into the host memory it is given.
  const void* Next(StreamId compute, const std::function<void(void*)>& fill);
  StreamId stream() const { return pre_.stream(); }

 private:
  DevicePrefetcher pre_;
  std::vector<unsigned char> host_;  // a batch assembled on the host (staged at Submit)
  bool started_ = false;
};

}  // namespace hogstream
