#include "core/math_gpu.hpp"

#include <memory>

#include "core/gpu_common.cuh"
#include "core/gpu_engine.hpp"

namespace hogstream {

namespace {
__global__ void SgdUpdateKernel(long long n, float scale, float decay, bool l1, float momentum, float lr, float* w,
                                float* g, float* h) {
  HS_GPU_LOOP(i, n) {
    const float wi = w[i];
    const float reg = l1 ? static_cast<float>((wi > 0.f) - (wi < 0.f)) : wi;
    const float gi = g[i] * scale + decay * reg;
    const float hi = momentum * h[i] + lr * gi;
    h[i] = hi;
    g[i] = hi;
    w[i] = wi - hi;
  }
}

void SgdUpdate(int n, float scale, float decay, bool l1, float momentum, float lr, float* w, float* g, float* h) {
  if (n > 0) HS_LAUNCH(SgdUpdateKernel, n, scale, decay, l1, momentum, lr, w, g, h);
}

// Tells the engine loader (core/context.cpp) that this library is in the process, and hands
// the core its kernels.
[[maybe_unused]] const bool kRegistered = [] {
  GpuKernels k;
  k.sgd_update = &SgdUpdate;
  RegisterGpuKernels(k);
  return true;
}();

__global__ void AxpyKernel(long long n, float a, const float* x, float* y) {
  HS_GPU_LOOP(i, n) y[i] += a * x[i];
}
__global__ void ScalKernel(long long n, float a, float* x) {
  HS_GPU_LOOP(i, n) x[i] *= a;
}
__global__ void ScaleKernel(long long n, float a, const float* x, float* y) {
  HS_GPU_LOOP(i, n) y[i] = a * x[i];
}
__global__ void SetKernel(long long n, float v, float* y) {
  HS_GPU_LOOP(i, n) y[i] = v;
}
__global__ void ReluKernel(long long n, float slope, const float* x, float* y) {
  HS_GPU_LOOP(i, n) y[i] = x[i] > 0.f ? x[i] : slope * x[i];
}
}  // namespace

namespace {
// The calling thread's library handles, kept in its Context.
struct GpuHandles {
  cublasHandle_t blas = nullptr;
#ifdef HOGSTREAM_CUDNN
  cudnnHandle_t dnn = nullptr;
#endif
};
GpuHandles& Handles() {
  Context& ctx = Context::Get();
  auto* h = static_cast<GpuHandles*>(ctx.gpu_handles());
  if (!h) {
    HS_CUDA_CHECK(cudaSetDevice(ctx.device()));
    h = new GpuHandles;
    ctx.set_gpu_handles(h, [](void* p) {
      auto* g = static_cast<GpuHandles*>(p);
      if (g->blas) cublasDestroy(g->blas);
#ifdef HOGSTREAM_CUDNN
      if (g->dnn) cudnnDestroy(g->dnn);
#endif
      delete g;
    });
  }
  return *h;
}
}  // namespace

cublasHandle_t Cublas() {
  GpuHandles& h = Handles();
  if (!h.blas) {
    HS_CUBLAS_CHECK(cublasCreate(&h.blas));
    HS_CUBLAS_CHECK(cublasSetStream(h.blas, GpuStream()));
  }
  return h.blas;
}

#ifdef HOGSTREAM_CUDNN
cudnnHandle_t Cudnn() {
  GpuHandles& h = Handles();
  if (!h.dnn) {
    HS_CUDNN_CHECK(cudnnCreate(&h.dnn));
    HS_CUDNN_CHECK(cudnnSetStream(h.dnn, GpuStream()));
  }
  return h.dnn;
}
#endif

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
  if (n > 0) HS_LAUNCH(AxpyKernel, n, alpha, x, y);
}
void gpu_scal(int n, float alpha, float* x) {
  if (n > 0) HS_LAUNCH(ScalKernel, n, alpha, x);
}
void gpu_scale(int n, float alpha, const float* x, float* y) {
  if (n > 0) HS_LAUNCH(ScaleKernel, n, alpha, x, y);
}
void gpu_copy(int n, const float* x, float* y) {
  if (n > 0 && x != y)
    HS_CUDA_CHECK(cudaMemcpyAsync(y, x, static_cast<size_t>(n) * sizeof(float), cudaMemcpyDeviceToDevice, GpuStream()));
}
void gpu_set(int n, float value, float* y) {
  if (n > 0) HS_LAUNCH(SetKernel, n, value, y);
}
void gpu_relu(int n, float slope, const float* x, float* y) {
  if (n > 0) HS_LAUNCH(ReluKernel, n, slope, x, y);
}
void gpu_sync() { HS_CUDA_CHECK(cudaStreamSynchronize(GpuStream())); }

}  // namespace hogstream
