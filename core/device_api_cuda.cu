// The CUDA runtime behind core/device_api.hpp: registered as the GPU engine loads, so that the
// GPU segment finds it with LoadedDeviceApi(). Streams and events are kept in tables under
// small ids (the seam hands out no CUDA types). Allocations are made on the calling thread's
// current device; work queued on a stream goes to the stream's own device, whichever thread
// queues it (one daemon drives the segments of several GPUs).
#include <cuda_runtime.h>

#include <map>
#include <mutex>

#include "base/common.hpp"
#include "core/context.hpp"
#include "core/device_api.hpp"
#include "core/gpu_common.cuh"
#include "core/slave_rule.hpp"

namespace hogstream {

namespace {

#define HS_CUDA_OK(expr)                                                                   \
  do {                                                                                     \
    const cudaError_t hs_e_ = (expr);                                                      \
    HS_CHECK(hs_e_ == cudaSuccess) << #expr << ": " << cudaGetErrorString(hs_e_);          \
  } while (0)

__global__ void SlaveRuleKernel(long long n, const float* pos, float* w, float* last, float* delta) {
  HS_GPU_LOOP(i, n) SlaveRuleStep(pos[i], w[i], last[i], delta[i]);
}

class CudaDeviceApi : public DeviceApi {
 public:
  const char* name() const override { return "CUDA"; }

  void* Alloc(size_t bytes) override {
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);
    HS_REQUIRE(e == cudaSuccess) << "cannot allocate " << bytes << " bytes on the GPU: " << cudaGetErrorString(e);
    return p;
  }
  void Free(void* p) override { HS_CUDA_OK(cudaFree(p)); }
  void* AllocPinned(size_t bytes) override {
    void* p = nullptr;
    const cudaError_t e = cudaMallocHost(&p, bytes);
    HS_REQUIRE(e == cudaSuccess) << "cannot pin " << bytes << " bytes of host memory: " << cudaGetErrorString(e);
    return p;
  }
  void FreePinned(void* p) override { HS_CUDA_OK(cudaFreeHost(p)); }

  StreamId CreateStream() override {
    cudaStream_t s = nullptr;
    HS_CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return Keep(s, false);
  }
  void DestroyStream(StreamId id) override {
    const Entry e = Take(streams_, id);
    HS_CHECK(!e.borrowed) << "DestroyStream of a thread's own stream";
    HS_CUDA_OK(cudaSetDevice(e.device));
    HS_CUDA_OK(cudaStreamSynchronize(e.stream));
    HS_CUDA_OK(cudaStreamDestroy(e.stream));
  }
  StreamId CurrentStream() override {
    const auto s = static_cast<cudaStream_t>(Context::Get().stream());
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& [id, e] : streams_)
        if (e.stream == s) return id;
    }
    return Keep(s, true);
  }
  EventId CreateEvent() override {
    cudaEvent_t e = nullptr;
    HS_CUDA_OK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    std::lock_guard<std::mutex> lock(mu_);
    events_[next_event_] = e;
    return next_event_++;
  }
  void DestroyEvent(EventId id) override { HS_CUDA_OK(cudaEventDestroy(Take(events_, id))); }

  void CopyAsync(void* dst, const void* src, size_t bytes, CopyKind kind, StreamId s) override {
    const cudaMemcpyKind k = kind == CopyKind::kHostToDevice   ? cudaMemcpyHostToDevice
                             : kind == CopyKind::kDeviceToHost ? cudaMemcpyDeviceToHost
                                                               : cudaMemcpyDeviceToDevice;
    HS_CUDA_OK(cudaMemcpyAsync(dst, src, bytes, k, Use(s)));
  }
  void LaunchSlaveRule(size_t n, const float* pos, float* w, float* last, float* delta, StreamId s) override {
    if (n == 0) return;
    const auto count = static_cast<long long>(n);
    SlaveRuleKernel<<<GpuBlocks(count), kGpuThreads, 0, Use(s)>>>(count, pos, w, last, delta);
    HS_KERNEL_CHECK("SlaveRuleKernel");
  }
  void Record(EventId e, StreamId s) override {
    const cudaStream_t stream = Use(s);
    HS_CUDA_OK(cudaEventRecord(Event(e), stream));
  }
  bool Query(EventId e) override {
    const cudaError_t r = cudaEventQuery(Event(e));
    if (r == cudaErrorNotReady) return false;
    HS_CUDA_OK(r);
    return true;
  }
  void WaitEvent(StreamId s, EventId e) override {
    const cudaStream_t stream = Use(s);
    HS_CUDA_OK(cudaStreamWaitEvent(stream, Event(e), 0));
  }
  void Synchronize(StreamId s) override { HS_CUDA_OK(cudaStreamSynchronize(Use(s))); }

 private:
  template <typename T>
  T Take(std::map<uint32_t, T>& table, uint32_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = table.find(id);
    HS_CHECK(it != table.end()) << "unknown device handle " << id;
    const T v = it->second;
    table.erase(it);
    return v;
  }
  template <typename T>
  T Find(const std::map<uint32_t, T>& table, uint32_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = table.find(id);
    HS_CHECK(it != table.end()) << "unknown device handle " << id;
    return it->second;
  }
  // A stream, its device, and whether it is a thread's Context stream (CurrentStream).
  struct Entry {
    cudaStream_t stream;
    int device;
    bool borrowed;
  };
  StreamId Keep(cudaStream_t s, bool borrowed) {
    int device = 0;
    HS_CUDA_OK(cudaGetDevice(&device));
    std::lock_guard<std::mutex> lock(mu_);
    streams_[next_stream_] = Entry{s, device, borrowed};
    return next_stream_++;
  }
  // Stream id, with the calling thread's current device set to the stream's.
  cudaStream_t Use(StreamId id) {
    const Entry e = Find(streams_, id);
    int current = -1;
    HS_CUDA_OK(cudaGetDevice(&current));
    if (current != e.device) HS_CUDA_OK(cudaSetDevice(e.device));
    return e.stream;
  }
  cudaEvent_t Event(EventId id) { return Find(events_, id); }

  std::mutex mu_;
  std::map<uint32_t, Entry> streams_;
  std::map<uint32_t, cudaEvent_t> events_;
  StreamId next_stream_ = 1;
  EventId next_event_ = 1;
};

// Registered as the library loads (as the kernels are, core/math_gpu.cu).
[[maybe_unused]] const bool kRegistered = [] {
  static CudaDeviceApi api;
  RegisterDeviceApi(&api);
  return true;
}();

}  // namespace

}  // namespace hogstream
