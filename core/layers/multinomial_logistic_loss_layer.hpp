// MultinomialLogisticLoss: bottom 0 holds class probabilities (N x C, e.g. a Softmax's top),
// bottom 1 one label per item. loss = -sum_n log(max(p[n, label_n], 1e-20)) / N. Only the
// probabilities get a gradient; labels are checked against [0, C).
#pragma once

#include "core/layers/loss_layer.hpp"

namespace hogstream {

class MultinomialLogisticLossLayer : public LossLayer {
 public:
  using LossLayer::LossLayer;
  const char* type() const override { return "MultinomialLogisticLoss"; }
  void Reshape(const Blobs& bottom, const Blobs& top) override;

  static constexpr float kLogThreshold = 1e-20f;

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;
};

}  // namespace hogstream
