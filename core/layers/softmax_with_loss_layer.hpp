// SoftmaxWithLoss: softmax of the scores (bottom 0) over softmax_param.axis, then the mean
// negative log-probability of the true classes (bottom 1, one label per outer x inner
// position). loss_param picks the normaliser and an ignore_label whose positions add no loss
// and get no gradient. An optional second top exposes the probabilities.
#pragma once

#include <memory>

#include "core/layers/loss_layer.hpp"
#include "core/layers/softmax_layer.hpp"

namespace hogstream {

class SoftmaxWithLossLayer : public LossLayer {
 public:
  using LossLayer::LossLayer;
  const char* type() const override { return "SoftmaxWithLoss"; }
  int ExactNumTopBlobs() const override { return -1; }
  int MinTopBlobs() const override { return 1; }
  int MaxTopBlobs() const override { return 2; }
  void LayerSetUp(const Blobs& bottom, const Blobs& top) override;
  void Reshape(const Blobs& bottom, const Blobs& top) override;

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;


 // Protected for the GPU twins (core/layers/*.cu), which derive from this class.
 protected:
  bool Ignored(int label) const { return has_ignore_label_ && label == ignore_label_; }
  // The softmax's parameters (axis): softmax_param here; InfogainLoss takes its own axis.
  virtual pb::SoftmaxParameter SoftmaxParam() const { return param_.softmax_param(); }

  std::unique_ptr<SoftmaxLayer> softmax_;
  Blob prob_;
  NormalizationMode normalization_ = pb::LossParameter::VALID;
  bool has_ignore_label_ = false;
  int ignore_label_ = 0;
  int outer_ = 0, channels_ = 0, inner_ = 0;
};

}  // namespace hogstream
