// ReLU: y = max(x, 0) + negative_slope * min(x, 0). Works in place.
#pragma once

#include "core/layers/neuron_layer.hpp"

namespace hogstream {

class ReLULayer : public NeuronLayer {
 public:
  using NeuronLayer::NeuronLayer;
  const char* type() const override { return "ReLU"; }
  Layouts LayoutSupport() const override { return Layouts::kAny; }
  // Fused into the BatchNorm + Scale before it (see batch_norm_layer.hpp): its passes are
  // skipped.
  void set_fused(bool fused) { fused_ = fused; }

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;


 // Protected for the GPU twins (core/layers/*.cu), which derive from this class.
 protected:
  bool fused_ = false;
};

}  // namespace hogstream
