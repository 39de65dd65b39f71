// Power: y = (shift + scale * x)^power, element-wise (power_param; defaults 1, 1, 0: the
// identity). Works in place (the input is kept aside for the gradient).
#pragma once

#include "core/layers/neuron_layer.hpp"

namespace hogstream {

class PowerLayer : public InputKeepingNeuronLayer {
 public:
  using InputKeepingNeuronLayer::InputKeepingNeuronLayer;
  const char* type() const override { return "Power"; }

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;
};

}  // namespace hogstream
