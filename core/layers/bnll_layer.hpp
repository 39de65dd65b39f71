// BNLL (binomial normal log-likelihood): y = log(1 + exp(x)), the softplus, element-wise.
// Works in place (the gradient, sigmoid(x), is read from y).
#pragma once

#include "core/layers/neuron_layer.hpp"

namespace hogstream {

class BNLLLayer : public NeuronLayer {
 public:
  using NeuronLayer::NeuronLayer;
  const char* type() const override { return "BNLL"; }

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;
};

}  // namespace hogstream
