// TanH: y = tanh(x), element-wise. Works in place (backward reads y, not x).
#pragma once

#include "core/layers/neuron_layer.hpp"

namespace hogstream {

class TanHLayer : public NeuronLayer {
 public:
  using NeuronLayer::NeuronLayer;
  const char* type() const override { return "TanH"; }

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;
};

}  // namespace hogstream
