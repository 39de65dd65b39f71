#include "core/math_gpu.hpp"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <memory>

#include "core/common.hpp"
#include "core/context.hpp"

namespace hogstream {

namespace {
constexpr int kThreads = 256;
int Blocks(int n) { return (n + kThreads - 1) / kThreads; }
cudaStream_t Stream() { return static_cast<cudaStream_t>(Context::Get().stream()); }

// The calling thread's cuBLAS handle, kept in its Context (created on first use, bound to the
// context's stream, destroyed with the context).
struct GpuHandles {
  cublasHandle_t blas = nullptr;
};
cublasHandle_t Cublas() {
  Context& ctx = Context::Get();
  auto* h = static_cast<GpuHandles*>(ctx.gpu_handles());
  if (!h) {
    HS_CUDA_CHECK(cudaSetDevice(ctx.device()));
    auto fresh = std::make_unique<GpuHandles>();
    HS_CHECK(cublasCreate(&fresh->blas) == CUBLAS_STATUS_SUCCESS) << "cublasCreate failed";
    cublasSetStream(fresh->blas, Stream());
    h = fresh.release();
    ctx.set_gpu_handles(h, [](void* p) {
      auto* g = static_cast<GpuHandles*>(p);
      cublasDestroy(g->blas);
      delete g;
    });
  }
  return h->blas;
}

__global__ void AxpyKernel(int n, float a, const float* x, float* y) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) y[i] += a * x[i];
}
__global__ void ScalKernel(int n, float a, float* x) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) x[i] *= a;
}
__global__ void SetKernel(int n, float v, float* y) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) y[i] = v;
}
__global__ void ReluKernel(int n, float slope, const float* x, float* y) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
    y[i] = x[i] > 0.f ? x[i] : slope * x[i];
}
}  // namespace

void gpu_gemm(Trans ta, Trans tb, int M, int N, int K, float alpha, const float* A,
              const float* B, float beta, float* C) {
  // cuBLAS is column-major: C^T = op(B)^T op(A)^T, so pass B first.
  const int lda = ta == Trans::No ? K : M;
  const int ldb = tb == Trans::No ? N : K;
  const cublasOperation_t opa = ta == Trans::No ? CUBLAS_OP_N : CUBLAS_OP_T;
  const cublasOperation_t opb = tb == Trans::No ? CUBLAS_OP_N : CUBLAS_OP_T;
  const cublasStatus_t st =
      cublasSgemm(Cublas(), opb, opa, N, M, K, &alpha, B, ldb, A, lda, &beta, C, N);
  HS_CHECK(st == CUBLAS_STATUS_SUCCESS) << "cublasSgemm failed: " << static_cast<int>(st);
}

void gpu_axpy(int n, float alpha, const float* x, float* y) {
  if (n > 0) AxpyKernel<<<Blocks(n), kThreads, 0, Stream()>>>(n, alpha, x, y);
}
void gpu_scal(int n, float alpha, float* x) {
  if (n > 0) ScalKernel<<<Blocks(n), kThreads, 0, Stream()>>>(n, alpha, x);
}
void gpu_set(int n, float value, float* y) {
  if (n > 0) SetKernel<<<Blocks(n), kThreads, 0, Stream()>>>(n, value, y);
}
void gpu_relu(int n, float slope, const float* x, float* y) {
  if (n > 0) ReluKernel<<<Blocks(n), kThreads, 0, Stream()>>>(n, slope, x, y);
}
void gpu_sync() { HS_CUDA_CHECK(cudaStreamSynchronize(Stream())); }

}  // namespace hogstream
