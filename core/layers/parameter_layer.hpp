// Parameter: a learned blob of parameter_param.shape, given as the layer's one top (no
// bottoms). Its values start at zero, as Caffe's do, unless a .caffemodel gives them; its
// gradient is the top's, accumulated like any parameter's.
#pragma once

#include <vector>

#include "core/layer.hpp"

namespace hogstream {

class ParameterLayer : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "Parameter"; }
  int ExactNumBottomBlobs() const override { return 0; }
  int ExactNumTopBlobs() const override { return 1; }
  void LayerSetUp(const Blobs& bottom, const Blobs& top) override;
  void Reshape(const Blobs& bottom, const Blobs& top) override;

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;
};

}  // namespace hogstream
