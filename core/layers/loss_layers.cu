// GPU twins of EuclideanLoss and SigmoidCrossEntropyLoss: the loss summed (in double, one block)
// and normalised on the device into the top, as the CPU layers compute it.
#include "core/gpu_common.cuh"
#include "core/layers/euclidean_loss_layer.hpp"
#include "core/layers/sigmoid_cross_entropy_loss_layer.hpp"
#include "core/math_gpu.hpp"

namespace hogstream {

namespace {

// d = a - b, and the top: sum of d^2 / items / 2.
__global__ void EuclideanForward(long long n, int items, const float* a, const float* b, float* d, float* top) {
  double sum = 0;
  for (long long i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = a[i] - b[i];
    d[i] = v;
    sum += static_cast<double>(v) * v;
  }
  const BlockTotals t = BlockReduce(sum, 0, 0);
  if (threadIdx.x == 0) *top = static_cast<float>(t.sum / items / 2.0);
}

__device__ __forceinline__ bool IgnoredTarget(bool has_ignore, int ignore, float t) {
  return has_ignore && static_cast<int>(t) == ignore;
}
// -(x (t - [x >= 0]) - log(1 + exp(x - 2 x [x >= 0]))) over the elements not ignored; the
// normaliser goes to scratch[0] for the backward pass.
__global__ void SigmoidCrossEntropyForward(long long n, int outer, int inner, const float* x, const float* t,
                                           bool has_ignore, int ignore, int mode, float* top, float* scratch) {
  double loss = 0;
  int valid = 0;
  for (long long i = threadIdx.x; i < n; i += blockDim.x) {
    if (IgnoredTarget(has_ignore, ignore, t[i])) continue;
    const float pos = x[i] >= 0.f ? 1.f : 0.f;
    loss -= x[i] * (t[i] - pos) - log1pf(expf(x[i] - 2.f * x[i] * pos));
    ++valid;
  }
  const BlockTotals s = BlockReduce(loss, valid, 0);
  if (threadIdx.x == 0) {
    const float norm = LossNormalizer(static_cast<NormalizationMode>(mode), outer, inner, s.count);
    scratch[0] = norm;
    *top = static_cast<float>(s.sum / norm);
  }
}
__global__ void SigmoidCrossEntropyBackward(long long n, const float* x, const float* t, bool has_ignore, int ignore,
                                            float weight, const float* scratch, float* dx) {
  const float scale = weight / scratch[0];
  HS_GPU_LOOP(i, n) {
    dx[i] = IgnoredTarget(has_ignore, ignore, t[i]) ? 0.f : scale * (0.5f * tanhf(0.5f * x[i]) + 0.5f - t[i]);
  }
}

}  // namespace

class EuclideanLossGpuLayer : public EuclideanLossLayer {
 public:
  using EuclideanLossLayer::EuclideanLossLayer;

 protected:
  void Forward_gpu(const Blobs& bottom, const Blobs& top) override {
    EuclideanForward<<<1, kGpuThreads, 0, GpuStream()>>>(bottom[0]->count(), bottom[0]->shape(0),
                                                        bottom[0]->gpu_data(), bottom[1]->gpu_data(),
                                                        diff_.mutable_gpu_data(), top[0]->mutable_gpu_data());
    HS_KERNEL_CHECK("EuclideanLoss forward");
  }
  void Backward_gpu(const Blobs& top, const std::vector<bool>& propagate_down, const Blobs& bottom) override {
    for (int i = 0; i < 2; ++i) {
      if (!propagate_down[i]) continue;
      const float a = (i == 0 ? 1.f : -1.f) * top[0]->cpu_diff()[0] / bottom[i]->shape(0);
      gpu_scale(diff_.count(), a, diff_.gpu_data(), bottom[i]->mutable_gpu_diff());
    }
  }
};

class SigmoidCrossEntropyLossGpuLayer : public SigmoidCrossEntropyLossLayer {
 public:
  using SigmoidCrossEntropyLossLayer::SigmoidCrossEntropyLossLayer;

 protected:
  void Forward_gpu(const Blobs& bottom, const Blobs& top) override {
    scratch_.Reshape(std::vector<int>{1});
    SigmoidCrossEntropyForward<<<1, kGpuThreads, 0, GpuStream()>>>(
        bottom[0]->count(), bottom[0]->shape(0), bottom[0]->count(1), bottom[0]->gpu_data(), bottom[1]->gpu_data(),
        has_ignore_label_, ignore_label_, static_cast<int>(normalization_), top[0]->mutable_gpu_data(),
        scratch_.mutable_gpu_data());
    HS_KERNEL_CHECK("SigmoidCrossEntropyLoss forward");
  }
  void Backward_gpu(const Blobs& top, const std::vector<bool>& propagate_down, const Blobs& bottom) override {
    HS_REQUIRE(!propagate_down[1]) << "SigmoidCrossEntropyLoss cannot backpropagate to the targets";
    if (!propagate_down[0]) return;
    HS_LAUNCH(SigmoidCrossEntropyBackward, static_cast<long long>(bottom[0]->count()), bottom[0]->gpu_data(), bottom[1]->gpu_data(), has_ignore_label_, ignore_label_, top[0]->cpu_diff()[0],
        scratch_.gpu_data(), bottom[0]->mutable_gpu_diff());
  }

 private:
  Blob scratch_;  // the normaliser of the last forward pass
};

HS_REGISTER_GPU_LAYER(EuclideanLoss, EuclideanLossGpuLayer);
HS_REGISTER_GPU_LAYER(SigmoidCrossEntropyLoss, SigmoidCrossEntropyLossGpuLayer);

}  // namespace hogstream
