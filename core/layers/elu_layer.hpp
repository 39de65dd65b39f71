// ELU: y = x for x > 0, alpha * (exp(x) - 1) otherwise, element-wise (elu_param.alpha,
// default 1). Works in place; with alpha >= 0 the sign of y is that of x, so the input is kept
// aside only for a negative alpha.
#pragma once

#include "core/layers/neuron_layer.hpp"

namespace hogstream {

class ELULayer : public InputKeepingNeuronLayer {
 public:
  using InputKeepingNeuronLayer::InputKeepingNeuronLayer;
  const char* type() const override { return "ELU"; }

 protected:
  bool KeepsInput() const override { return param_.elu_param().alpha() < 0.f; }
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;
};

}  // namespace hogstream
