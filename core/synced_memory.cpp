#include "core/synced_memory.hpp"

#include <cstdlib>
#include <cstring>

#include <atomic>

#include "base/common.hpp"
#include "core/context.hpp"

#ifdef HOGSTREAM_CUDA
#include <cuda_runtime.h>
#endif

namespace hogstream {

namespace {
std::atomic<uint64_t> pin_attempts{0};
}  // namespace

uint64_t PinAttempts() { return pin_attempts.load(std::memory_order_relaxed); }

void* HostAlloc(size_t size, bool* pinned) {
  *pinned = false;
  if (size == 0) size = 1;
#ifdef HOGSTREAM_CUDA
  // Only a GPU-mode thread pins: its Context has checked that the device exists, and CPU
  // training on a GPU host must neither create a CUDA context nor page-lock its memory.
  if (Context::Get().mode() == Mode::GPU) {
    pin_attempts.fetch_add(1, std::memory_order_relaxed);
    void* p = nullptr;
    if (cudaMallocHost(&p, size) == cudaSuccess) {
      *pinned = true;
      return p;
    }
    cudaGetLastError();  // clear the failure; fall back to pageable memory
  }
#endif
  size_t rounded = (size + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  HS_CHECK(p != nullptr) << "host allocation of " << size << " bytes failed";
  return p;
}

void HostFree(void* ptr, bool pinned) {
#ifdef HOGSTREAM_CUDA
  if (pinned) {
    cudaFreeHost(ptr);
    return;
  }
#endif
  (void)pinned;
  std::free(ptr);
}

#ifdef HOGSTREAM_CUDA
namespace {
// GPU kernels run on the Context's stream, which does not wait for the legacy default stream
// (nor it for them): copies go on that stream and are waited for, so that a copy never races a
// kernel and the host buffer is free when the copy returns. A thread not in GPU mode (reading
// a result after its GPU work) waits for the whole device first.
cudaStream_t CopyStream() {
  Context& ctx = Context::Get();
  if (ctx.mode() == Mode::GPU) return static_cast<cudaStream_t>(ctx.stream());
  HS_CUDA_CHECK(cudaDeviceSynchronize());
  return nullptr;
}
void Copy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  cudaStream_t s = CopyStream();
  HS_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, kind, s));
  HS_CUDA_CHECK(cudaStreamSynchronize(s));
}
void Zero(void* dst, size_t n) {
  cudaStream_t s = CopyStream();
  HS_CUDA_CHECK(cudaMemsetAsync(dst, 0, n, s));
  HS_CUDA_CHECK(cudaStreamSynchronize(s));
}
}  // namespace
#endif

SyncedMemory::~SyncedMemory() {
  if (cpu_ptr_ && own_cpu_) HostFree(cpu_ptr_, cpu_pinned_);
#ifdef HOGSTREAM_CUDA
  if (gpu_ptr_ && own_gpu_) {
    int prev = 0;
    cudaGetDevice(&prev);
    cudaSetDevice(gpu_device_);
    cudaFree(gpu_ptr_);
    cudaSetDevice(prev);
  }
#endif
}

void SyncedMemory::to_cpu() {
  switch (head_) {
    case UNINITIALIZED:
      cpu_ptr_ = HostAlloc(size_, &cpu_pinned_);
      std::memset(cpu_ptr_, 0, size_);
      own_cpu_ = true;
      head_ = HEAD_AT_CPU;
      break;
    case HEAD_AT_GPU:
#ifdef HOGSTREAM_CUDA
      if (!cpu_ptr_) {
        cpu_ptr_ = HostAlloc(size_, &cpu_pinned_);
        own_cpu_ = true;
      }
      Copy(cpu_ptr_, gpu_ptr_, size_, cudaMemcpyDeviceToHost);
      head_ = SYNCED;
#else
      HS_CHECK(false) << "GPU memory on a build without CUDA";
#endif
      break;
    case HEAD_AT_CPU:
    case SYNCED:
      break;
  }
}

void SyncedMemory::to_gpu() {
#ifdef HOGSTREAM_CUDA
  switch (head_) {
    case UNINITIALIZED:
      HS_CUDA_CHECK(cudaGetDevice(&gpu_device_));
      HS_CUDA_CHECK(cudaMalloc(&gpu_ptr_, size_ ? size_ : 1));
      Zero(gpu_ptr_, size_);
      own_gpu_ = true;
      head_ = HEAD_AT_GPU;
      break;
    case HEAD_AT_CPU:
      if (!gpu_ptr_) {
        HS_CUDA_CHECK(cudaGetDevice(&gpu_device_));
        HS_CUDA_CHECK(cudaMalloc(&gpu_ptr_, size_ ? size_ : 1));
        own_gpu_ = true;
      }
      Copy(gpu_ptr_, cpu_ptr_, size_, cudaMemcpyHostToDevice);
      head_ = SYNCED;
      break;
    case HEAD_AT_GPU:
    case SYNCED:
      break;
  }
#else
  HS_CHECK(false) << "GPU memory requested on a build without CUDA";
#endif
}

const void* SyncedMemory::cpu_data() {
  to_cpu();
  return cpu_ptr_;
}

void* SyncedMemory::mutable_cpu_data() {
  to_cpu();
  head_ = HEAD_AT_CPU;
  return cpu_ptr_;
}

void SyncedMemory::set_cpu_data(void* data) {
  HS_CHECK(data != nullptr);
  if (cpu_ptr_ && own_cpu_) HostFree(cpu_ptr_, cpu_pinned_);
  cpu_ptr_ = data;
  own_cpu_ = false;
  cpu_pinned_ = false;
  head_ = HEAD_AT_CPU;
}

void SyncedMemory::device_zero() {
#ifdef HOGSTREAM_CUDA
  HS_CHECK(gpu_ptr_ != nullptr);
  HS_CUDA_CHECK(cudaMemsetAsync(gpu_ptr_, 0, size_, CopyStream()));
  head_ = HEAD_AT_GPU;
#else
  HS_CHECK(false) << "GPU memory on a build without CUDA";
#endif
}

void SyncedMemory::host_zeroed() {
  if (!cpu_ptr_) return;
#ifdef HOGSTREAM_CUDA
  if (gpu_ptr_) {
    HS_CUDA_CHECK(cudaMemsetAsync(gpu_ptr_, 0, size_, CopyStream()));
    head_ = SYNCED;
    return;
  }
#endif
  head_ = HEAD_AT_CPU;
}

const void* SyncedMemory::gpu_data() {
  to_gpu();
  return gpu_ptr_;
}

void* SyncedMemory::mutable_gpu_data() {
  to_gpu();
  head_ = HEAD_AT_GPU;
  return gpu_ptr_;
}

void SyncedMemory::set_gpu_data(void* data) {
#ifdef HOGSTREAM_CUDA
  HS_CHECK(data != nullptr);
  if (gpu_ptr_ && own_gpu_) cudaFree(gpu_ptr_);
  gpu_ptr_ = data;
  own_gpu_ = false;
  head_ = HEAD_AT_GPU;
#else
  (void)data;
  HS_CHECK(false) << "GPU memory on a build without CUDA";
#endif
}

}  // namespace hogstream
