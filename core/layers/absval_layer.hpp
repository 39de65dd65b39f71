// AbsVal: y = |x|, element-wise. Not in place, as in Caffe: the gradient needs the sign of x.
#pragma once

#include "core/layers/neuron_layer.hpp"

namespace hogstream {

class AbsValLayer : public NeuronLayer {
 public:
  using NeuronLayer::NeuronLayer;
  const char* type() const override { return "AbsVal"; }
  void LayerSetUp(const Blobs& bottom, const Blobs& top) override;

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;
};

}  // namespace hogstream
