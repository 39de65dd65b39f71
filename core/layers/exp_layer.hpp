// Exp: y = base^(shift + scale * x), element-wise (exp_param; base -1, the default, is e).
// Works in place (the gradient is read from y).
#pragma once

#include "core/layers/neuron_layer.hpp"

namespace hogstream {

class ExpLayer : public NeuronLayer {
 public:
  using NeuronLayer::NeuronLayer;
  const char* type() const override { return "Exp"; }
  void LayerSetUp(const Blobs& bottom, const Blobs& top) override;

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;

 private:
  // y = outer_ * exp(inner_ * x): inner_ = scale * ln(base), outer_ = base^shift.
  float inner_ = 1.f, outer_ = 1.f;
};

}  // namespace hogstream
