#include "core/math_gpu.hpp"

#include <memory>

#include "core/gpu_common.cuh"
#include "core/gpu_engine.hpp"

namespace hogstream {

namespace {
// Each rule as the host solvers write it (core/solvers/*.cpp), element by element, in float.
__global__ void UpdateKernel(long long n, DeviceUpdate u, float* w, float* g, float* h, float* h2) {
  HS_GPU_LOOP(i, n) {
    const float wi = w[i];
    const float reg = u.l1 ? static_cast<float>((wi > 0.f) - (wi < 0.f)) : wi;
    const float gi = g[i] * u.scale + u.decay * reg;
    float step = 0.f;
    switch (u.rule) {
      case DeviceUpdate::kSgd: {
        const float hi = u.momentum * h[i] + u.lr * gi;
        h[i] = hi;
        step = hi;
        break;
      }
      case DeviceUpdate::kNesterov: {
        const float prev = h[i];
        const float hi = u.momentum * prev + u.lr * gi;
        h[i] = hi;
        step = (1 + u.momentum) * hi - u.momentum * prev;
        break;
      }
      case DeviceUpdate::kAdaGrad: {
        const float hi = h[i] + gi * gi;
        h[i] = hi;
        step = u.lr * gi / (sqrtf(hi) + u.delta);
        break;
      }
      case DeviceUpdate::kRMSProp: {
        const float hi = u.rms_decay * h[i] + (1 - u.rms_decay) * gi * gi;
        h[i] = hi;
        step = u.lr * gi / (sqrtf(hi) + u.delta);
        break;
      }
      case DeviceUpdate::kAdaDelta: {
        const float m = u.momentum;
        const float hg = (1 - m) * gi * gi + m * h[i];
        h[i] = hg;
        const float du = gi * sqrtf((h2[i] + u.delta) / (hg + u.delta));
        h2[i] = (1 - m) * du * du + m * h2[i];
        step = u.lr * du;
        break;
      }
      case DeviceUpdate::kAdam: {
        const float mi = u.momentum * h[i] + (1 - u.momentum) * gi;
        const float vi = u.momentum2 * h2[i] + (1 - u.momentum2) * gi * gi;
        h[i] = mi;
        h2[i] = vi;
        step = u.lr * mi / (sqrtf(vi) + u.delta);
        break;
      }
    }
    g[i] = step;
    w[i] = wi - step;
  }
}

void Update(int n, const DeviceUpdate& u, float* w, float* g, float* h, float* h2) {
  if (n > 0) HS_LAUNCH(UpdateKernel, n, u, w, g, h, h2);
}

double SumSquares(int n, const float* x) {
  if (n <= 0) return 0;
  float r = 0;
  HS_CUBLAS_CHECK(cublasSdot(Cublas(), n, x, 1, x, 1, &r));  // host pointer mode: waits for it
  return r;
}

void ScaleInPlace(int n, float a, float* x) {
  if (n > 0) HS_CUBLAS_CHECK(cublasSscal(Cublas(), n, &a, x, 1));
}

// Tells the engine loader (core/context.cpp) that this library is in the process, and hands
// the core its kernels.
[[maybe_unused]] const bool kRegistered = [] {
  GpuKernels k;
  k.update = &Update;
  k.sumsq = &SumSquares;
  k.scale = &ScaleInPlace;
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
