// Log: y = log_base(shift + scale * x), element-wise (log_param; base -1, the default, is e).
// Works in place (the input is kept aside for the gradient).
#pragma once

#include "core/layers/neuron_layer.hpp"

namespace hogstream {

class LogLayer : public InputKeepingNeuronLayer {
 public:
  using InputKeepingNeuronLayer::InputKeepingNeuronLayer;
  const char* type() const override { return "Log"; }
  void LayerSetUp(const Blobs& bottom, const Blobs& top) override;

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;

 private:
  float inv_ln_base_ = 1.f;  // 1 / ln(base)
};

}  // namespace hogstream
