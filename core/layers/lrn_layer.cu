// GPU twin of LRN: ACROSS_CHANNELS on cuDNN's cross-channel LRN, whose formula is the CPU
// layer's (x / (k + alpha / n * sum of squares over n channels)^beta). WITHIN_CHANNEL, an in
// place layer and parameters outside cuDNN's range (n 1..16, k >= 1e-5, beta >= 0.01) run the
// CPU passes. Built only with cuDNN.
#ifdef HOGSTREAM_CUDNN

#include "core/gpu_common.cuh"
#include "core/layers/lrn_layer.hpp"

namespace hogstream {

class LRNGpuLayer : public LRNLayer {
 public:
  using LRNLayer::LRNLayer;
  ~LRNGpuLayer() override {
    if (described_) {
      cudnnDestroyLRNDescriptor(lrn_);
      cudnnDestroyTensorDescriptor(x_);
    }
  }

 protected:
  bool OnCudnn(const Blobs& bottom, const Blobs& top) const {
    return across_ && bottom[0] != top[0] && size_ >= CUDNN_LRN_MIN_N && size_ <= CUDNN_LRN_MAX_N &&
           k_ >= CUDNN_LRN_MIN_K && beta_ >= CUDNN_LRN_MIN_BETA;
  }
  void Describe(const Blob& b) {
    if (!described_) {
      HS_CUDNN_CHECK(cudnnCreateLRNDescriptor(&lrn_));
      HS_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x_));
      HS_CUDNN_CHECK(cudnnSetLRNDescriptor(lrn_, static_cast<unsigned>(size_), alpha_, beta_, k_));
      described_ = true;
    }
    HS_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, b.shape(0), channels_,
                                              height_, width_));
  }
  void Forward_gpu(const Blobs& bottom, const Blobs& top) override {
    if (!OnCudnn(bottom, top)) return Forward_cpu(bottom, top);
    Describe(*bottom[0]);
    const float one = 1.f, zero = 0.f;
    HS_CUDNN_CHECK(cudnnLRNCrossChannelForward(Cudnn(), lrn_, CUDNN_LRN_CROSS_CHANNEL_DIM1, &one, x_,
                                               bottom[0]->gpu_data(), &zero, x_, top[0]->mutable_gpu_data()));
  }
  void Backward_gpu(const Blobs& top, const std::vector<bool>& propagate_down, const Blobs& bottom) override {
    if (!OnCudnn(bottom, top)) return Backward_cpu(top, propagate_down, bottom);
    if (!propagate_down[0]) return;
    Describe(*bottom[0]);
    const float one = 1.f, zero = 0.f;
    HS_CUDNN_CHECK(cudnnLRNCrossChannelBackward(Cudnn(), lrn_, CUDNN_LRN_CROSS_CHANNEL_DIM1, &one, x_,
                                                top[0]->gpu_data(), x_, top[0]->gpu_diff(), x_, bottom[0]->gpu_data(),
                                                &zero, x_, bottom[0]->mutable_gpu_diff()));
  }

 private:
  bool described_ = false;
  cudnnLRNDescriptor_t lrn_{};
  cudnnTensorDescriptor_t x_{};
};

HS_REGISTER_GPU_LAYER(LRN, LRNGpuLayer);

}  // namespace hogstream

#endif  // HOGSTREAM_CUDNN
