// GPU twins of Softmax and SoftmaxWithLoss. The loss is summed, normalised and written into the
// top on the device; only a label out of range costs a look at the host (one 4-byte flag read
// per pass), so that it stays the CPU layer's one-line Error.
#include <cfloat>
#include <climits>

#include "core/gpu_common.cuh"
#include "core/layers/softmax_layer.hpp"
#include "core/layers/softmax_with_loss_layer.hpp"

namespace hogstream {

namespace {

// One thread per (outer, inner) position, over the channels in order; reads each element
// before writing it (in place is fine).
__global__ void SoftmaxForward(int outer, int channels, int inner, const float* x, float* y) {
  HS_GPU_LOOP(p, static_cast<long long>(outer) * inner) {
    const long long o = p / inner, i = p % inner;
    const float* xs = x + o * channels * inner + i;
    float* ys = y + o * channels * inner + i;
    float mx = -INFINITY;
    for (int c = 0; c < channels; ++c) mx = fmaxf(mx, xs[c * inner]);
    float sum = 0.f;
    for (int c = 0; c < channels; ++c) {
      const float e = expf(xs[c * inner] - mx);
      ys[c * inner] = e;
      sum += e;
    }
    for (int c = 0; c < channels; ++c) ys[c * inner] /= sum;
  }
}

__global__ void SoftmaxBackward(int outer, int channels, int inner, const float* y, const float* dy, float* dx) {
  HS_GPU_LOOP(p, static_cast<long long>(outer) * inner) {
    const long long base = p / inner * channels * inner + p % inner;
    float dot = 0.f;
    for (int c = 0; c < channels; ++c) dot += dy[base + c * inner] * y[base + c * inner];
    for (int c = 0; c < channels; ++c) {
      const long long k = base + c * inner;
      dx[k] = y[k] * (dy[k] - dot);
    }
  }
}

// One block: the loss over every position, the valid count, the normaliser (written to
// scratch[0] for the backward pass), the loss into *top, and the first position whose label is
// out of range (or INT_MAX) into *bad.
constexpr int kLossThreads = kGpuThreads;
__global__ void SoftmaxLoss(int outer, int channels, int inner, const float* prob, const float* label,
                            bool has_ignore, int ignore, int mode, float* top, float* scratch, int* bad) {
  double loss = 0;
  int valid = 0, first_bad = INT_MAX;
  const int positions = outer * inner;
  for (int p = threadIdx.x; p < positions; p += blockDim.x) {
    const int l = DeviceLabel(label[p]);
    if (has_ignore && l == ignore) continue;
    if (l < 0 || l >= channels) {
      first_bad = min(first_bad, p);
      continue;
    }
    const int o = p / inner, i = p % inner;
    loss -= log(fmaxf(prob[(static_cast<long long>(o) * channels + l) * inner + i], FLT_MIN));
    ++valid;
  }
  const BlockTotals t = BlockReduce(loss, valid, first_bad);
  if (threadIdx.x == 0) {
    const float n = LossNormalizer(static_cast<NormalizationMode>(mode), outer, inner, t.count);
    scratch[0] = n;
    *top = static_cast<float>(t.sum / n);
    *bad = t.min;
  }
}

// dx = (prob - onehot(label)) * weight / normaliser, zero at ignored positions.
__global__ void SoftmaxLossBackward(int outer, int channels, int inner, const float* prob, const float* label,
                                    bool has_ignore, int ignore, float weight, const float* scratch, float* dx) {
  const float scale = weight / scratch[0];
  HS_GPU_LOOP(k, static_cast<long long>(outer) * channels * inner) {
    const long long i = k % inner, c = k / inner % channels, o = k / (static_cast<long long>(inner) * channels);
    const int l = DeviceLabel(label[o * inner + i]);
    dx[k] = has_ignore && l == ignore ? 0.f : (prob[k] - (c == l ? 1.f : 0.f)) * scale;
  }
}

void LaunchSoftmax(int outer, int channels, int inner, const float* x, float* y) {
  SoftmaxForward<<<GpuBlocks(static_cast<long long>(outer) * inner), kGpuThreads, 0, GpuStream()>>>(
      outer, channels, inner, x, y);
  HS_KERNEL_CHECK("Softmax forward");
}

}  // namespace

class SoftmaxGpuLayer : public SoftmaxLayer {
 public:
  using SoftmaxLayer::SoftmaxLayer;

 protected:
  void Forward_gpu(const Blobs& bottom, const Blobs& top) override {
    LaunchSoftmax(outer_, channels_, inner_, bottom[0]->gpu_data(), top[0]->mutable_gpu_data());
  }
  void Backward_gpu(const Blobs& top, const std::vector<bool>& propagate_down, const Blobs& bottom) override {
    if (!propagate_down[0]) return;
    SoftmaxBackward<<<GpuBlocks(static_cast<long long>(outer_) * inner_), kGpuThreads, 0, GpuStream()>>>(
        outer_, channels_, inner_, top[0]->gpu_data(), top[0]->gpu_diff(), bottom[0]->mutable_gpu_diff());
    HS_KERNEL_CHECK("Softmax backward");
  }
};

class SoftmaxWithLossGpuLayer : public SoftmaxWithLossLayer {
 public:
  using SoftmaxWithLossLayer::SoftmaxWithLossLayer;

 protected:
  void Forward_gpu(const Blobs& bottom, const Blobs& top) override {
    LaunchSoftmax(outer_, channels_, inner_, bottom[0]->gpu_data(), prob_.mutable_gpu_data());
    scratch_.Reshape(std::vector<int>{2});
    float* s = scratch_.mutable_gpu_data();
    SoftmaxLoss<<<1, kLossThreads, 0, GpuStream()>>>(outer_, channels_, inner_, prob_.gpu_data(),
                                                     bottom[1]->gpu_data(), has_ignore_label_, ignore_label_,
                                                     static_cast<int>(normalization_), top[0]->mutable_gpu_data(), s,
                                                     reinterpret_cast<int*>(s + 1));
    HS_KERNEL_CHECK("SoftmaxWithLoss forward");
    // The flag comes back with the loss: Layer::Forward's read of the loss waits for the stream,
    // and FinishForward looks at it then.
    if (!bad_) {
      HS_CUDA_CHECK(cudaMallocHost(&bad_, sizeof(int)));
      *bad_ = INT_MAX;
    }
    HS_CUDA_CHECK(cudaMemcpyAsync(bad_, s + 1, sizeof(int), cudaMemcpyDeviceToHost, GpuStream()));
    labels_ = bottom[1];
    if (top.size() > 1) top[1]->ShareData(prob_);
  }
  void FinishForward() override {
    if (!labels_ || Context::Get().mode() != Mode::GPU) return;
    HS_CUDA_CHECK(cudaStreamSynchronize(GpuStream()));  // idle already when the loss was read
    const int bad = *bad_;
    *bad_ = INT_MAX;
    Blob* labels = labels_;
    labels_ = nullptr;
    if (bad != INT_MAX) {
      const float lf = labels->cpu_data()[bad];
      CheckLabel(lf, LabelValue(lf), channels_, bad / inner_, bad % inner_, inner_ > 1);
    }
  }
  void Backward_gpu(const Blobs& top, const std::vector<bool>& propagate_down, const Blobs& bottom) override {
    HS_REQUIRE(!propagate_down[1]) << "SoftmaxWithLoss cannot backpropagate to the labels";
    if (!propagate_down[0]) return;
    const long long n = prob_.count();
    SoftmaxLossBackward<<<GpuBlocks(n), kGpuThreads, 0, GpuStream()>>>(
        outer_, channels_, inner_, prob_.gpu_data(), bottom[1]->gpu_data(), has_ignore_label_, ignore_label_,
        top[0]->cpu_diff()[0], scratch_.gpu_data(), bottom[0]->mutable_gpu_diff());
    HS_KERNEL_CHECK("SoftmaxWithLoss backward");
  }

 private:
  Blob scratch_;  // [normaliser, first bad label position (int bits)]
  int* bad_ = nullptr;        // pinned: that position, back on the host
  Blob* labels_ = nullptr;    // the labels of the pass FinishForward has yet to check

 public:
  ~SoftmaxWithLossGpuLayer() override {
    if (bad_) cudaFreeHost(bad_);
  }
};

HS_REGISTER_GPU_LAYER(Softmax, SoftmaxGpuLayer);
HS_REGISTER_GPU_LAYER(SoftmaxWithLoss, SoftmaxWithLossGpuLayer);

}  // namespace hogstream
