// SyncedMemory: one array of bytes that may live on the host, on a GPU, or both, and knows
// which copy is fresh. Reading a side that is stale copies the fresh one over first; asking for
// a mutable pointer marks the other side stale.
//
// Host memory is 64-byte aligned, and pinned (cudaMallocHost) when it is allocated on a thread
// whose Context is in GPU mode, so that copies to the device can be asynchronous; CPU work
// never pins and never touches CUDA. Memory can also be borrowed (set_cpu_data): that is how a
// Net points every parameter blob into its one flat weight buffer. Not thread-safe: one owner
// thread at a time (the sync segments work on the flat buffers, not through this class).
#pragma once

#include <cstddef>
#include <cstdint>

namespace hogstream {

class SyncedMemory {
 public:
  enum Head { UNINITIALIZED, HEAD_AT_CPU, HEAD_AT_GPU, SYNCED };

  SyncedMemory() = default;
  explicit SyncedMemory(size_t size) : size_(size) {}
  ~SyncedMemory();
  SyncedMemory(const SyncedMemory&) = delete;
  SyncedMemory& operator=(const SyncedMemory&) = delete;

  const void* cpu_data();
  void* mutable_cpu_data();
  // Borrow `data` (size() bytes, owned by the caller, which must outlive this object).
  void set_cpu_data(void* data);
  const void* gpu_data();
  void* mutable_gpu_data();
  void set_gpu_data(void* data);

  // The host copy was written directly (a borrowed buffer, written in bulk by the Net or the
  // solver): it becomes the fresh one, and the device copy is refreshed at its next use.
  void host_written() {
    if (cpu_ptr_) head_ = HEAD_AT_CPU;
  }

  // The device copy was written directly (a borrowed device buffer, written by a sync segment's
  // kernels): it becomes the fresh one, and the host copy is refreshed at its next read.
  void device_written() {
    if (gpu_ptr_) head_ = HEAD_AT_GPU;
  }

  // The host copy was zeroed directly: a device copy, if there is one, is zeroed too (queued
  // on the calling thread's stream, not waited for) and both stay fresh, so a gradient buffer
  // cleared every iteration is not uploaded every iteration.
  void host_zeroed();
  // Zero the device copy only (queued on the calling thread's stream): the device copy becomes
  // the fresh one and the host copy is refreshed when it is next read. Needs a device copy.
  void device_zero();
  bool on_device() const { return gpu_ptr_ != nullptr; }

  Head head() const { return head_; }
  size_t size() const { return size_; }

 private:
  void to_cpu();
  void to_gpu();

  void* cpu_ptr_ = nullptr;
  void* gpu_ptr_ = nullptr;
  size_t size_ = 0;
  Head head_ = UNINITIALIZED;
  bool own_cpu_ = false;
  bool own_gpu_ = false;
  bool cpu_pinned_ = false;
  int gpu_device_ = -1;
};

// Host allocation used for every buffer that may be copied to a GPU: 64-byte aligned, pinned
// on CUDA builds when the calling thread's Context is in GPU mode (a failed pin falls back to
// pageable memory). `pinned` reports which was done, for the free.
void* HostAlloc(size_t size, bool* pinned);
void HostFree(void* ptr, bool pinned);
// How many times HostAlloc has asked CUDA for pinned memory in this process (tests: CPU work
// must never ask).
uint64_t PinAttempts();

}  // namespace hogstream
