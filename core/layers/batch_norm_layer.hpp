// BatchNorm: per-channel normalisation y = (x - mean) / sqrt(var + eps) of an N x C x ... input
// (or N x C, or N), exactly as Caffe's layer: the batch statistics in training, the stored
// ones with use_global_stats (the default in TEST). Its three blobs are Caffe's: the running
// sums of means and of variances (unbiased, m / (m - 1)) and their common scale factor; the
// stored statistics are those sums divided by the factor. The blobs are never learned.
#pragma once

#include <vector>

#include "core/layer.hpp"

namespace hogstream {

class BatchNormLayer : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "BatchNorm"; }
  int ExactNumBottomBlobs() const override { return 1; }
  int ExactNumTopBlobs() const override { return 1; }
  void LayerSetUp(const Blobs& bottom, const Blobs& top) override;
  void Reshape(const Blobs& bottom, const Blobs& top) override;

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;

 private:
  bool use_global_stats_ = false;
  float moving_average_fraction_ = 0.999f, eps_ = 1e-5f;
  int channels_ = 0;
  std::vector<float> mean_, var_, std_;  // this pass's per-channel mean, variance (batch
                                         // statistics only) and sqrt(var + eps)
  Blob x_norm_;  // the output, kept for backward (the top may be changed in place later)
};

}  // namespace hogstream
