// BatchNorm: per-channel normalisation y = (x - mean) / sqrt(var + eps) of an N x C x ... input
// (or N x C, or N), exactly as Caffe's layer: the batch statistics in training, the stored
// ones with use_global_stats (the default in TEST). Its three blobs are Caffe's: the running
// sums of means and of variances (unbiased, m / (m - 1)) and their common scale factor; the
// stored statistics are those sums divided by the factor. The blobs are never learned.
//
// Fusion: the Net hands a BatchNorm the in-place, per-channel Scale after it (and the in-place
// ReLU after that) when all three work on one blob (FuseScale). The BatchNorm then writes
// relu(y * s + b) in its own pass and keeps y in x_norm_; the Scale's backward takes its
// gradients and the BatchNorm's two sums in one pass from the ReLU's top gradient; the
// BatchNorm's backward writes dx. The Scale and ReLU skip their own passes. Their blobs stay
// theirs (the .caffemodel is unchanged) and the results are those of the three layers (up to
// the rounding of a fused multiply-add).
#pragma once

#include <vector>

#include "core/layer.hpp"

namespace hogstream {

class ScaleLayer;
class ReLULayer;

class BatchNormLayer : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "BatchNorm"; }
  int ExactNumBottomBlobs() const override { return 1; }
  int ExactNumTopBlobs() const override { return 1; }
  void LayerSetUp(const Blobs& bottom, const Blobs& top) override;
  void Reshape(const Blobs& bottom, const Blobs& top) override;

  // Takes over `scale` (and `relu`, or null) as above. keep_norm: keep x_norm_ with stored
  // statistics too (the Scale's gradient needs it when the net runs backward).
  void FuseScale(ScaleLayer* scale, ReLULayer* relu, bool keep_norm);
  bool fused() const { return scale_ != nullptr; }
  // Fused, the chain's passes also walk the channel-blocked layout (see Layer::Layouts).
  Layouts LayoutSupport() const override { return scale_ ? Layouts::kAny : Layouts::kPlain; }
  void SetBlocked(const std::vector<bool>& bottom, const std::vector<bool>& top) override;
  // The fused Scale's backward, from the gradient of the blob (the ReLU's top gradient when
  // fused): adds the scale and bias gradients into ds and db (either may be null) and takes
  // this layer's sums for Backward.
  void FusedScaleBackward(const Blob& blob, float* ds, float* db);
  // The same on the device (ds, db device pointers; either may be null): the GPU twin's.
  virtual void FusedScaleBackwardGpu(const Blob& blob, float* ds, float* db) {
    HS_CHECK(false) << "a fused Scale's GPU backward without BatchNorm's GPU twin";
  }

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;

 protected:  // (and the GPU twin's, batch_norm_layer.cu)
  bool use_global_stats_ = false;
  float moving_average_fraction_ = 0.999f, eps_ = 1e-5f;
  int channels_ = 0;
  std::vector<float> mean_, var_, std_;  // this pass's per-channel mean, variance (batch
                                         // statistics only) and sqrt(var + eps)
  Blob x_norm_;  // the output, kept for backward (the top may be changed in place later)

  ScaleLayer* scale_ = nullptr;  // fused: the Scale (and ReLU) this layer runs
  bool relu_ = false, keep_norm_ = false;
  bool blocked_ = false;  // the blob is nChw16c (channels_ % 16 == 0)
  // Fused, batch statistics: mean(dy) and mean(dy * y) of the BatchNorm's own top gradient
  // dy = relu'(z) * dz * s, taken by FusedScaleBackward (sums_ready_) for Backward_cpu.
  std::vector<float> mean_dy_, mean_dyy_;
  bool sums_ready_ = false;
  std::vector<double> sums_;  // per-channel totals of the memory-order passes (4 per channel)
  void ChannelSums(const Blob& blob, float* ds, float* db);
  // The blocked layout's passes (batch_norm_blocked.cpp), fused chains only.
  void ForwardBlocked(const float* x, float* y, float* xn, const float* sv, const float* bv,
                      int num, int spatial);
  void ChannelSumsBlocked(const float* r, const float* dr, const float* y, int num, int spatial);
  void FusedDxBlocked(const float* r, const float* dr, const float* y, float* dx, int num,
                      int spatial);
};

}  // namespace hogstream
