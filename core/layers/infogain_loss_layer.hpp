// InfogainLoss: softmax of the scores (bottom 0) over infogain_loss_param.axis (default 1),
// then, per position with label l (bottom 1), -sum_k H[l, k] log(p_k), H being a K x K
// infogain matrix from a third bottom or, without one, the BlobProto file
// infogain_loss_param.source. loss_param's normalization (default VALID) and ignore_label work
// as in SoftmaxWithLoss; with H the identity the two layers agree. An optional second top
// exposes the probabilities. Neither the labels nor H get a gradient.
#pragma once

#include <memory>

#include "core/layers/loss_layer.hpp"
#include "core/layers/softmax_layer.hpp"

namespace hogstream {

class InfogainLossLayer : public LossLayer {
 public:
  using LossLayer::LossLayer;
  const char* type() const override { return "InfogainLoss"; }
  int ExactNumBottomBlobs() const override { return -1; }
  int MinBottomBlobs() const override { return 2; }
  int MaxBottomBlobs() const override { return 3; }
  int ExactNumTopBlobs() const override { return -1; }
  int MinTopBlobs() const override { return 1; }
  int MaxTopBlobs() const override { return 2; }
  bool AllowForceBackward(int bottom_index) const override { return bottom_index == 0; }
  void LayerSetUp(const Blobs& bottom, const Blobs& top) override;
  void Reshape(const Blobs& bottom, const Blobs& top) override;

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;

  bool Ignored(int label) const { return has_ignore_label_ && label == ignore_label_; }
  const Blob& Infogain(const Blobs& bottom) const {
    return bottom.size() > 2 ? *bottom[2] : infogain_;
  }

  std::unique_ptr<SoftmaxLayer> softmax_;
  Blob prob_;
  Blob infogain_;  // H from infogain_loss_param.source, when there is no third bottom
  NormalizationMode normalization_ = pb::LossParameter::VALID;
  bool has_ignore_label_ = false;
  int ignore_label_ = 0;
  int outer_ = 0, channels_ = 0, inner_ = 0;
};

}  // namespace hogstream
