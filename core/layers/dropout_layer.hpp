// Dropout (Caffe's inverted form): in TRAIN each unit is kept with probability 1 - ratio and
// scaled by 1 / (1 - ratio), the keep mask drawn from the thread's Context generator; in TEST
// the layer is the identity. Works in place.
#pragma once

#include <vector>

#include "core/layers/neuron_layer.hpp"

namespace hogstream {

class DropoutLayer : public NeuronLayer {
 public:
  using NeuronLayer::NeuronLayer;
  const char* type() const override { return "Dropout"; }
  void LayerSetUp(const Blobs& bottom, const Blobs& top) override;
  void Reshape(const Blobs& bottom, const Blobs& top) override;

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;


 // Protected for the GPU twins (core/layers/*.cu), which derive from this class.
 protected:
  float ratio_ = 0.5f, scale_ = 2.f;
  std::vector<unsigned> mask_;  // TRAIN: 1 where the unit is kept
};

}  // namespace hogstream
