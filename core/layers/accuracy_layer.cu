// GPU twin of Accuracy: one block counts the positions, the correct ones and, per class, the
// examples and hits (Caffe's rule: correct when fewer than top_k other classes score at least
// as high as the true class), and writes the tops on the device. A label out of range is the
// CPU layer's one-line Error: its first position comes back with the pass (a 4-byte read
// after the stream, which the caller of a metric waits for anyway).
#include <climits>

#include "core/gpu_common.cuh"
#include "core/layers/accuracy_layer.hpp"

namespace hogstream {

namespace {

// counts: 2 * channels ints (examples, then hits, per class), zeroed before the launch.
__global__ void AccuracyCount(int outer, int channels, int inner, int top_k, const float* score, const float* label,
                              bool has_ignore, int ignore, int* counts, float* accuracy, float* per_class, int* bad) {
  int count = 0, correct = 0, first_bad = INT_MAX;
  const int positions = outer * inner;
  for (int p = threadIdx.x; p < positions; p += blockDim.x) {
    const int l = DeviceLabel(label[p]);
    if (has_ignore && l == ignore) continue;
    if (l < 0 || l >= channels) {
      first_bad = min(first_bad, p);
      continue;
    }
    const int o = p / inner, i = p % inner;
    const float* s = score + static_cast<long long>(o) * channels * inner + i;
    const float true_score = s[static_cast<long long>(l) * inner];
    int rivals = 0;
    for (int c = 0; c < channels && rivals < top_k; ++c) rivals += c != l && s[static_cast<long long>(c) * inner] >= true_score;
    ++count;
    atomicAdd(&counts[l], 1);
    if (rivals < top_k) {
      ++correct;
      atomicAdd(&counts[channels + l], 1);
    }
  }
  const BlockTotals t = BlockReduce(correct, count, first_bad);
  if (threadIdx.x == 0) {
    *accuracy = t.count ? static_cast<float>(static_cast<int>(t.sum)) / t.count : 0.f;
    *bad = t.min;
  }
  __threadfence_block();
  __syncthreads();
  if (per_class)
    for (int c = threadIdx.x; c < channels; c += blockDim.x)
      per_class[c] = counts[c] ? static_cast<float>(counts[channels + c]) / counts[c] : 0.f;
}

}  // namespace

class AccuracyGpuLayer : public AccuracyLayer {
 public:
  using AccuracyLayer::AccuracyLayer;
  ~AccuracyGpuLayer() override {
    if (bad_) cudaFreeHost(bad_);
  }

 protected:
  void Forward_gpu(const Blobs& bottom, const Blobs& top) override {
    const auto& p = param_.accuracy_param();
    counts_.Reshape(std::vector<int>{2 * channels_ + 1});
    int* counts = reinterpret_cast<int*>(counts_.mutable_gpu_data());
    HS_CUDA_CHECK(cudaMemsetAsync(counts, 0, 2 * static_cast<size_t>(channels_) * sizeof(int), GpuStream()));
    AccuracyCount<<<1, kGpuThreads, 0, GpuStream()>>>(
        outer_, channels_, inner_, static_cast<int>(p.top_k()), bottom[0]->gpu_data(), bottom[1]->gpu_data(),
        p.has_ignore_label(), p.ignore_label(), counts, top[0]->mutable_gpu_data(),
        top.size() > 1 ? top[1]->mutable_gpu_data() : nullptr, counts + 2 * channels_);
    HS_KERNEL_CHECK("Accuracy");
    if (!bad_) HS_CUDA_CHECK(cudaMallocHost(&bad_, sizeof(int)));
    *bad_ = INT_MAX;
    HS_CUDA_CHECK(cudaMemcpyAsync(bad_, counts + 2 * channels_, sizeof(int), cudaMemcpyDeviceToHost, GpuStream()));
    labels_ = bottom[1];
  }
  void FinishForward() override {
    if (!labels_ || Context::Get().mode() != Mode::GPU) return;
    HS_CUDA_CHECK(cudaStreamSynchronize(GpuStream()));
    const int bad = *bad_;
    Blob* labels = labels_;
    labels_ = nullptr;
    if (bad != INT_MAX) {
      const float lf = labels->cpu_data()[bad];
      CheckLabel(lf, LabelValue(lf), channels_, bad / inner_, bad % inner_, inner_ > 1);
    }
  }

 private:
  Blob counts_;            // per class: examples, hits; then the first bad label's position
  int* bad_ = nullptr;     // pinned: that position, back on the host
  Blob* labels_ = nullptr; // the labels of the pass FinishForward has yet to check
};

HS_REGISTER_GPU_LAYER(Accuracy, AccuracyGpuLayer);

}  // namespace hogstream
