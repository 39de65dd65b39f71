// SigmoidCrossEntropyLoss: cross-entropy between sigmoid(x) (bottom 0) and targets t in
// [0, 1] (bottom 1, same count), summed and divided by the loss_param normaliser. Computed
// from x directly in a form that cannot overflow. Targets equal to ignore_label add nothing.
// As in Caffe, the normaliser defaults to BATCH_SIZE for this layer (not VALID), unless
// `normalization` or the legacy `normalize` is given.
#pragma once

#include "core/layers/loss_layer.hpp"

namespace hogstream {

class SigmoidCrossEntropyLossLayer : public LossLayer {
 public:
  using LossLayer::LossLayer;
  const char* type() const override { return "SigmoidCrossEntropyLoss"; }
  void LayerSetUp(const Blobs& bottom, const Blobs& top) override;
  void Reshape(const Blobs& bottom, const Blobs& top) override;

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;


 // Protected for the GPU twins (core/layers/*.cu), which derive from this class.
 protected:
  bool Ignored(float target) const {
    return has_ignore_label_ && static_cast<int>(target) == ignore_label_;
  }

  NormalizationMode normalization_ = pb::LossParameter::BATCH_SIZE;
  bool has_ignore_label_ = false;
  int ignore_label_ = 0;
  float normalizer_ = 1.f;  // from the last Forward, reused by Backward
};

}  // namespace hogstream
