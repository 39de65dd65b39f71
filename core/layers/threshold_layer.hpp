// Threshold: y = x > threshold ? 1 : 0, element-wise (threshold_param, default 0). A step has
// no useful gradient: as in Caffe, asking for one is an error (give the layer
// propagate_down: false, or nothing below it that learns). Works in place.
#pragma once

#include "core/layers/neuron_layer.hpp"

namespace hogstream {

class ThresholdLayer : public NeuronLayer {
 public:
  using NeuronLayer::NeuronLayer;
  const char* type() const override { return "Threshold"; }

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;
};

}  // namespace hogstream
