// GPU twin of InnerProduct: cuBLAS for the three products, small kernels for the bias.
#include "core/gpu_common.cuh"
#include "core/layers/inner_product_layer.hpp"
#include "core/math_gpu.hpp"

namespace hogstream {

namespace {

__global__ void AddBias(long long rows, int n, const float* b, float* y) {
  HS_GPU_LOOP(i, rows * n) y[i] += b[i % n];
}
// db[j] += sum over rows of dy[r, j]: one thread per output, rows in order (as on the CPU).
__global__ void BiasGradient(int rows, int n, const float* dy, float* db) {
  HS_GPU_LOOP(j, n) {
    float s = 0.f;
    for (int r = 0; r < rows; ++r) s += dy[static_cast<long long>(r) * n + j];
    db[j] += s;
  }
}

}  // namespace

class InnerProductGpuLayer : public InnerProductLayer {
 public:
  using InnerProductLayer::InnerProductLayer;

 protected:
  void Forward_gpu(const Blobs& bottom, const Blobs& top) override {
    float* y = top[0]->mutable_gpu_data();
    gpu_gemm(Trans::No, transpose_ ? Trans::No : Trans::Yes, M_, N_, K_, 1.f, bottom[0]->gpu_data(),
             blobs_[0]->gpu_data(), 0.f, y);
    if (bias_term_) {
      AddBias<<<GpuBlocks(static_cast<long long>(M_) * N_), kGpuThreads, 0, GpuStream()>>>(
          M_, N_, blobs_[1]->gpu_data(), y);
      HS_KERNEL_CHECK("InnerProduct bias");
    }
  }
  void Backward_gpu(const Blobs& top, const std::vector<bool>& propagate_down, const Blobs& bottom) override {
    const float* dy = top[0]->gpu_diff();
    if (param_propagate_down(0)) {
      const float* x = bottom[0]->gpu_data();
      float* dw = blobs_[0]->mutable_gpu_diff();
      if (transpose_) {
        gpu_gemm(Trans::Yes, Trans::No, K_, N_, M_, 1.f, x, dy, 1.f, dw);
      } else {
        gpu_gemm(Trans::Yes, Trans::No, N_, K_, M_, 1.f, dy, x, 1.f, dw);
      }
    }
    if (bias_term_ && param_propagate_down(1)) {
      BiasGradient<<<GpuBlocks(N_), kGpuThreads, 0, GpuStream()>>>(M_, N_, dy, blobs_[1]->mutable_gpu_diff());
      HS_KERNEL_CHECK("InnerProduct bias gradient");
    }
    if (propagate_down[0])
      gpu_gemm(Trans::No, transpose_ ? Trans::Yes : Trans::No, M_, K_, N_, 1.f, dy, blobs_[0]->gpu_data(), 0.f,
               bottom[0]->mutable_gpu_diff());
  }
};

HS_REGISTER_GPU_LAYER(InnerProduct, InnerProductGpuLayer);

}  // namespace hogstream
