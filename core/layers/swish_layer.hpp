// Swish: y = x * sigmoid(beta * x), element-wise (swish_param.beta, default 1). Keeps the
// sigmoid for the gradient, so works in place.
#pragma once

#include "core/layers/neuron_layer.hpp"

namespace hogstream {

class SwishLayer : public NeuronLayer {
 public:
  using NeuronLayer::NeuronLayer;
  const char* type() const override { return "Swish"; }
  void Reshape(const Blobs& bottom, const Blobs& top) override;

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;

 private:
  Blob sigmoid_;  // sigmoid(beta * x), from the last Forward
};

}  // namespace hogstream
