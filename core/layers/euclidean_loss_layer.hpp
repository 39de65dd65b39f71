// EuclideanLoss: sum((a - b)^2) / (2 N) for bottoms a and b of equal per-item size, N being
// the first dimension. Both bottoms get a gradient (b's with the opposite sign), so either may
// be forced to backpropagate.
#pragma once

#include "core/layers/loss_layer.hpp"

namespace hogstream {

class EuclideanLossLayer : public LossLayer {
 public:
  using LossLayer::LossLayer;
  const char* type() const override { return "EuclideanLoss"; }
  bool AllowForceBackward(int bottom_index) const override { return true; }
  void Reshape(const Blobs& bottom, const Blobs& top) override;

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;


 // Protected for the GPU twins (core/layers/*.cu), which derive from this class.
 protected:
  Blob diff_;  // a - b
};

}  // namespace hogstream
