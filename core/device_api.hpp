// The few calls of a GPU runtime that the GPU↔host sync segment (sync/gpu_segment.hpp) and the
// device data stream make, behind one narrow seam: streams, events, asynchronous copies, pinned
// host memory, device buffers, and the segment's rule kernel. The real one (CUDA) lives in the
// hogstream_gpu library and is registered as the engine loads (LoadedDeviceApi); a CPU fake with
// CUDA's ordering semantics (test/core/fake_device.hpp) stands in for it in the tests, so the
// logic above the seam runs on every CI machine, with or without a GPU.
//
// Semantics (CUDA's, which the fake keeps): work queued on one stream runs in order, and
// asynchronously to the caller; work on different streams is unordered unless an event orders
// it (WaitEvent); an event is complete once its stream has reached it; a copy whose host side
// is not pinned (AllocPinned) is synchronous: it returns once the bytes have moved (after the
// work queued before it on its stream). Pointers from Alloc are device memory: the host never
// reads or writes them except through a copy.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hogstream {

enum class CopyKind : uint8_t { kHostToDevice, kDeviceToHost, kDeviceToDevice };

// Handles: small numbers the API hands out (0 is never one).
using StreamId = uint32_t;
using EventId = uint32_t;

class DeviceApi {
 public:
  virtual ~DeviceApi() = default;

  // One line naming the device (the fake says it is one).
  virtual const char* name() const = 0;

  // Device memory (uninitialised) and page-locked host memory; Free / FreePinned take what
  // they handed out. A failed allocation is an Error.
  virtual void* Alloc(size_t bytes) = 0;
  virtual void Free(void* p) = 0;
  virtual void* AllocPinned(size_t bytes) = 0;
  virtual void FreePinned(void* p) = 0;

  virtual StreamId CreateStream() = 0;
  virtual void DestroyStream(StreamId s) = 0;  // after its work is done (waits for it)
  // The stream the calling thread's engine work is queued on (its Context's, in GPU mode), as
  // a handle: the same one at every call from that thread; not for DestroyStream.
  virtual StreamId CurrentStream() = 0;
  virtual EventId CreateEvent() = 0;
  virtual void DestroyEvent(EventId e) = 0;

  // Queues a copy of `bytes` on stream s (see above for a host side that is not pinned).
  virtual void CopyAsync(void* dst, const void* src, size_t bytes, CopyKind kind, StreamId s) = 0;
  // Queues the slave's side of the delta rule over n elements on stream s (device pointers):
  // for each i, SlaveRuleStep(pos[i], w[i], last[i], delta[i]) (core/slave_rule.hpp).
  virtual void LaunchSlaveRule(size_t n, const float* pos, float* w, float* last, float* delta, StreamId s) = 0;
  // Event e completes when stream s reaches this point (a new recording replaces the last).
  virtual void Record(EventId e, StreamId s) = 0;
  // Whether e's last recording has completed (true for one never recorded). Never blocks.
  virtual bool Query(EventId e) = 0;
  // Work queued on s after this waits for e's last recording.
  virtual void WaitEvent(StreamId s, EventId e) = 0;
  // Blocks until everything queued on s so far has run.
  virtual void Synchronize(StreamId s) = 0;
};

// The registered runtime (the CUDA one, as the GPU engine loads; a test may register its fake),
// or nullptr when none is.
DeviceApi* LoadedDeviceApi();
void RegisterDeviceApi(DeviceApi* api);

}  // namespace hogstream
