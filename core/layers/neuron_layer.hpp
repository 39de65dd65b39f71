// NeuronLayer: the shape contract of element-wise layers (ReLU, Sigmoid, TanH, Dropout): one
// bottom, one top of the same shape, in place allowed. Subclasses add only the maths.
#pragma once

#include "core/layer.hpp"

namespace hogstream {

class NeuronLayer : public Layer {
 public:
  using Layer::Layer;
  int ExactNumBottomBlobs() const override { return 1; }
  int ExactNumTopBlobs() const override { return 1; }
  void Reshape(const Blobs& bottom, const Blobs& top) override { top[0]->ReshapeLike(*bottom[0]); }
};

}  // namespace hogstream
