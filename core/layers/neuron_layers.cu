// GPU twins of the element-wise layers: ReLU, Sigmoid, TanH, Dropout. Each derives from its
// CPU class (set-up, shapes and parameters are the CPU layer's) and overrides the GPU passes;
// test/core/layers_gpu_test.cc checks them against the CPU passes.
#include "core/gpu_common.cuh"
#include "core/layers/dropout_layer.hpp"
#include "core/layers/relu_layer.hpp"
#include "core/layers/sigmoid_layer.hpp"
#include "core/layers/tanh_layer.hpp"
#include "core/math_gpu.hpp"

namespace hogstream {

namespace {

// In place the bottom data is the top data; y > 0 iff x > 0 for slope >= 0 (as on the CPU).
__global__ void ReluBackward(long long n, float slope, const float* y, const float* dy, float* dx) {
  HS_GPU_LOOP(i, n) dx[i] = y[i] > 0.f ? dy[i] : slope * dy[i];
}
// Activations whose gradient is a function of the output: y = F(x), dx = dy * G(y).
struct SigmoidOp {
  __device__ static float F(float x) { return 0.5f * tanhf(0.5f * x) + 0.5f; }
  __device__ static float G(float y) { return y * (1.f - y); }
};
struct TanHOp {
  __device__ static float F(float x) { return tanhf(x); }
  __device__ static float G(float y) { return 1.f - y * y; }
};
template <class Op>
__global__ void PointwiseForward(long long n, const float* x, float* y) {
  HS_GPU_LOOP(i, n) y[i] = Op::F(x[i]);
}
template <class Op>
__global__ void PointwiseBackward(long long n, const float* y, const float* dy, float* dx) {
  HS_GPU_LOOP(i, n) dx[i] = dy[i] * Op::G(y[i]);
}

// A counter-based draw: element i of pass `seed` (a 32-bit mix of both, then the top 24 bits
// as a uniform in [0, 1)). Independent of launch shape, so a pass is reproducible.
__device__ __forceinline__ float Uniform(unsigned seed, unsigned long long i) {
  unsigned long long z = (i + 1) * 0x9E3779B97F4A7C15ull ^ (static_cast<unsigned long long>(seed) << 32 | seed);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (1.f / 16777216.f);
}
__global__ void DropoutForward(long long n, unsigned seed, float ratio, float scale, const float* x,
                               float* mask, float* y) {
  HS_GPU_LOOP(i, n) {
    const float keep = Uniform(seed, i) >= ratio ? 1.f : 0.f;
    mask[i] = keep;
    y[i] = x[i] * keep * scale;
  }
}
__global__ void DropoutBackward(long long n, float scale, const float* mask, const float* dy, float* dx) {
  HS_GPU_LOOP(i, n) dx[i] = dy[i] * mask[i] * scale;
}

}  // namespace

class ReLUGpuLayer : public ReLULayer {
 public:
  using ReLULayer::ReLULayer;

 protected:
  void Forward_gpu(const Blobs& bottom, const Blobs& top) override {
    if (fused_) return;  // done by the BatchNorm before it
    gpu_relu(bottom[0]->count(), param_.relu_param().negative_slope(), bottom[0]->gpu_data(),
             top[0]->mutable_gpu_data());
  }
  void Backward_gpu(const Blobs& top, const std::vector<bool>& propagate_down, const Blobs& bottom) override {
    if (!propagate_down[0] || fused_) return;
    const long long n = bottom[0]->count();
    HS_LAUNCH(ReluBackward, n, param_.relu_param().negative_slope(), top[0]->gpu_data(), top[0]->gpu_diff(),
              bottom[0]->mutable_gpu_diff());
  }
};

template <class Base, class Op>
class PointwiseGpuLayer : public Base {
 public:
  using Base::Base;

 protected:
  void Forward_gpu(const Blobs& bottom, const Blobs& top) override {
    const long long n = bottom[0]->count();
    HS_LAUNCH(PointwiseForward<Op>, n, bottom[0]->gpu_data(), top[0]->mutable_gpu_data());
  }
  void Backward_gpu(const Blobs& top, const std::vector<bool>& propagate_down, const Blobs& bottom) override {
    if (!propagate_down[0]) return;
    const long long n = bottom[0]->count();
    HS_LAUNCH(PointwiseBackward<Op>, n, top[0]->gpu_data(), top[0]->gpu_diff(), bottom[0]->mutable_gpu_diff());
  }
};
using SigmoidGpuLayer = PointwiseGpuLayer<SigmoidLayer, SigmoidOp>;
using TanHGpuLayer = PointwiseGpuLayer<TanHLayer, TanHOp>;

// TRAIN: each element kept with probability 1 - ratio and scaled by 1 / (1 - ratio); the mask
// (0 or 1 per element) lives on the device for the backward pass. TEST: the identity.
class DropoutGpuLayer : public DropoutLayer {
 public:
  using DropoutLayer::DropoutLayer;

 protected:
  void Forward_gpu(const Blobs& bottom, const Blobs& top) override {
    const long long n = bottom[0]->count();
    if (phase_ != pb::TRAIN) {
      if (bottom[0] != top[0]) gpu_copy(static_cast<int>(n), bottom[0]->gpu_data(), top[0]->mutable_gpu_data());
      return;
    }
    gpu_mask_.ReshapeLike(*bottom[0]);
    const unsigned seed = static_cast<unsigned>(Context::Get().rng()());
    HS_LAUNCH(DropoutForward, n, seed, ratio_, scale_, bottom[0]->gpu_data(), gpu_mask_.mutable_gpu_data(),
              top[0]->mutable_gpu_data());
  }
  void Backward_gpu(const Blobs& top, const std::vector<bool>& propagate_down, const Blobs& bottom) override {
    if (!propagate_down[0]) return;
    const long long n = bottom[0]->count();
    if (phase_ != pb::TRAIN) {
      if (bottom[0] != top[0]) gpu_copy(static_cast<int>(n), top[0]->gpu_diff(), bottom[0]->mutable_gpu_diff());
      return;
    }
    HS_LAUNCH(DropoutBackward, n, scale_, gpu_mask_.gpu_data(), top[0]->gpu_diff(), bottom[0]->mutable_gpu_diff());
  }

 private:
  Blob gpu_mask_;
};

HS_REGISTER_GPU_LAYER(ReLU, ReLUGpuLayer);
HS_REGISTER_GPU_LAYER(Sigmoid, SigmoidGpuLayer);
HS_REGISTER_GPU_LAYER(TanH, TanHGpuLayer);
HS_REGISTER_GPU_LAYER(Dropout, DropoutGpuLayer);

}  // namespace hogstream
