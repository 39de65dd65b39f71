// Shared by the GPU engine's sources (core/*.cu, core/layers/*.cu) only: the calling thread's
// stream and library handles, launch sizes and error checks.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#ifdef HOGSTREAM_CUDNN
#include <cudnn.h>
#endif

#include <algorithm>

#include "base/common.hpp"
#include "core/context.hpp"

namespace hogstream {

constexpr int kGpuThreads = 256;
// Blocks for n elements with grid-stride loops (HS_GPU_LOOP): at most 8192, the rest loops.
inline int GpuBlocks(long long n) {
  return static_cast<int>(std::min<long long>(std::max<long long>((n + kGpuThreads - 1) / kGpuThreads, 1), 8192));
}
// The calling thread's Context stream: every kernel and library call of the engine goes on it.
inline cudaStream_t GpuStream() { return static_cast<cudaStream_t>(Context::Get().stream()); }
// The calling thread's cuBLAS and cuDNN handles, bound to its stream (made on first use, kept
// in its Context and destroyed with it).
cublasHandle_t Cublas();
#ifdef HOGSTREAM_CUDNN
cudnnHandle_t Cudnn();
#endif

// Sums of one block's threads (blockDim.x a power of two, at most kGpuThreads): every thread
// passes its value; thread 0 gets the totals. Every thread of the block must call it.
struct BlockTotals {
  double sum;
  int count;
  int min;
};
__device__ inline BlockTotals BlockReduce(double sum, int count, int min_value) {
  __shared__ double s[kGpuThreads];
  __shared__ int c[kGpuThreads], m[kGpuThreads];
  s[threadIdx.x] = sum;
  c[threadIdx.x] = count;
  m[threadIdx.x] = min_value;
  __syncthreads();
  for (unsigned k = blockDim.x / 2; k > 0; k /= 2) {
    if (threadIdx.x < k) {
      s[threadIdx.x] += s[threadIdx.x + k];
      c[threadIdx.x] += c[threadIdx.x + k];
      m[threadIdx.x] = ::min(m[threadIdx.x], m[threadIdx.x + k]);
    }
    __syncthreads();
  }
  return {s[0], c[0], m[0]};
}

// A class label (a float) as Layer::LabelValue reads it: its int value, or -1 out of int range.
__device__ __forceinline__ int DeviceLabel(float v) {
  return v > -2147483648.f && v < 2147483648.f ? static_cast<int>(v) : -1;
}

#define HS_GPU_LOOP(i, n)                                                            \
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; \
       i < static_cast<long long>(n); i += static_cast<long long>(blockDim.x) * gridDim.x)

// After a launch: a bad configuration is a Bug with the launch's name.
#define HS_KERNEL_CHECK(name) \
  HS_CHECK(cudaPeekAtLastError() == cudaSuccess) << name << ": " << cudaGetErrorString(cudaGetLastError())

// kernel<<<blocks for n, kGpuThreads, 0, this thread's stream>>>(n, args...), then the launch
// check: for kernels that take their element count first and loop with HS_GPU_LOOP.
#define HS_LAUNCH(kernel, n, ...)                                            \
  do {                                                                       \
    kernel<<<GpuBlocks(n), kGpuThreads, 0, GpuStream()>>>(n, __VA_ARGS__);   \
    HS_KERNEL_CHECK(#kernel);                                                \
  } while (0)

#define HS_CUBLAS_CHECK(expr)                                                          \
  do {                                                                                 \
    const cublasStatus_t hs_st_ = (expr);                                              \
    HS_CHECK(hs_st_ == CUBLAS_STATUS_SUCCESS) << #expr << ": status " << static_cast<int>(hs_st_); \
  } while (0)

#ifdef HOGSTREAM_CUDNN
#define HS_CUDNN_CHECK(expr)                                                           \
  do {                                                                                 \
    const cudnnStatus_t hs_st_ = (expr);                                               \
    HS_CHECK(hs_st_ == CUDNN_STATUS_SUCCESS) << #expr << ": " << cudnnGetErrorString(hs_st_); \
  } while (0)
#endif

}  // namespace hogstream
