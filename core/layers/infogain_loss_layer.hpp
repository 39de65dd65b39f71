// InfogainLoss: softmax of the scores (bottom 0) over infogain_loss_param.axis (default 1),
// then, per position with label l (bottom 1), -sum_k H[l, k] log(p_k), H being a K x K
// infogain matrix from a third bottom or, without one, the BlobProto file
// infogain_loss_param.source. loss_param's normalization (default VALID) and ignore_label work
// as in SoftmaxWithLoss; with H the identity the two layers agree. An optional second top
// exposes the probabilities. Neither the labels nor H get a gradient.
#pragma once

#include <memory>

#include "core/layers/softmax_with_loss_layer.hpp"

namespace hogstream {

// The softmax, the label geometry, ignore_label and normalization are SoftmaxWithLoss's.
class InfogainLossLayer : public SoftmaxWithLossLayer {
 public:
  using SoftmaxWithLossLayer::SoftmaxWithLossLayer;
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

  pb::SoftmaxParameter SoftmaxParam() const override {
    pb::SoftmaxParameter p;
    p.set_axis(param_.infogain_loss_param().axis());
    return p;
  }
  const Blob& Infogain(const Blobs& bottom) const {
    return bottom.size() > 2 ? *bottom[2] : infogain_;
  }

  Blob infogain_;  // H from infogain_loss_param.source, when there is no third bottom
};

}  // namespace hogstream
