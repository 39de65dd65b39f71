// Clip: y = min(max(x, min), max), element-wise (clip_param; min and max must both be given,
// min <= max). The gradient passes where min <= x <= max. Works in place (the input is kept
// aside: from y alone, x on a bound cannot be told from x beyond it).
#pragma once

#include "core/layers/neuron_layer.hpp"

namespace hogstream {

class ClipLayer : public InputKeepingNeuronLayer {
 public:
  using InputKeepingNeuronLayer::InputKeepingNeuronLayer;
  const char* type() const override { return "Clip"; }
  void LayerSetUp(const Blobs& bottom, const Blobs& top) override;

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;
};

}  // namespace hogstream
