// HingeLoss: one-vs-all hinge on scores (bottom 0, N x C) with one label per item (bottom 1).
// With t = +1 for the true class and -1 for the others, the per-class terms are
// max(0, 1 - t * x); hinge_loss_param.norm L1 (default) sums them, L2 sums their squares; the
// total is divided by N. Only the scores get a gradient.
#pragma once

#include "core/layers/loss_layer.hpp"

namespace hogstream {

class HingeLossLayer : public LossLayer {
 public:
  using LossLayer::LossLayer;
  const char* type() const override { return "HingeLoss"; }
  void Reshape(const Blobs& bottom, const Blobs& top) override;

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;

  Blob margin_;  // max(0, 1 - t * x) per score
};

}  // namespace hogstream
