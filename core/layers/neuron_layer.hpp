// NeuronLayer: the shape contract of element-wise layers (ReLU, Sigmoid, TanH, Dropout): one
// bottom, one top of the same shape, in place allowed. Subclasses add only the maths.
//
// InputKeepingNeuronLayer is for those whose gradient needs the input x and cannot recover it
// from y (Power, Log, Clip, PReLU): in place, Forward copies x aside before overwriting it.
#pragma once

#include "core/layer.hpp"
#include "core/math.hpp"

namespace hogstream {

class NeuronLayer : public Layer {
 public:
  using Layer::Layer;
  int ExactNumBottomBlobs() const override { return 1; }
  int ExactNumTopBlobs() const override { return 1; }
  void Reshape(const Blobs& bottom, const Blobs& top) override { top[0]->ReshapeLike(*bottom[0]); }
};

class InputKeepingNeuronLayer : public NeuronLayer {
 public:
  using NeuronLayer::NeuronLayer;
  void Reshape(const Blobs& bottom, const Blobs& top) override {
    NeuronLayer::Reshape(bottom, top);
    if (bottom[0] == top[0] && KeepsInput()) kept_.ReshapeLike(*bottom[0]);
  }

 protected:
  // Whether this layer's backward needs the copy at all (ELU with alpha >= 0 does not).
  virtual bool KeepsInput() const { return true; }
  // Forward's x: the bottom itself, or in place a copy taken now (so y may be written while
  // x is read).
  const float* KeepInput(const Blobs& bottom, const Blobs& top) {
    if (bottom[0] != top[0] || !KeepsInput()) return bottom[0]->cpu_data();
    copy(bottom[0]->count(), bottom[0]->cpu_data(), kept_.mutable_cpu_data());
    return kept_.cpu_data();
  }
  // Backward's x: the bottom, or in place the copy Forward took.
  const float* KeptInput(const Blobs& top, const Blobs& bottom) const {
    return bottom[0] == top[0] && KeepsInput() ? kept_.cpu_data() : bottom[0]->cpu_data();
  }

 private:
  Blob kept_;
};

}  // namespace hogstream
