// ContrastiveLoss: bottoms a and b (N x C, same shape) and a similarity label y (N values,
// nonzero = similar). With d the Euclidean distance between a_n and b_n, similar pairs add
// d^2 and dissimilar ones max(margin - d, 0)^2 (contrastive_loss_param.legacy_version:
// max(margin - d^2, 0)); the sum is divided by 2N. a and b get gradients, y none.
#pragma once

#include "core/layers/loss_layer.hpp"

namespace hogstream {

class ContrastiveLossLayer : public LossLayer {
 public:
  using LossLayer::LossLayer;
  const char* type() const override { return "ContrastiveLoss"; }
  int ExactNumBottomBlobs() const override { return 3; }
  bool AllowForceBackward(int bottom_index) const override { return bottom_index != 2; }
  void Reshape(const Blobs& bottom, const Blobs& top) override;

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;

  Blob diff_;     // a - b
  Blob dist_sq_;  // |a_n - b_n|^2 per item
};

}  // namespace hogstream
