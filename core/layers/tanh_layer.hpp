// TanH: y = tanh(x), element-wise. Works in place (backward reads y, not x).
#pragma once

#include "core/layer.hpp"

namespace hogstream {

class TanHLayer : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "TanH"; }
  int ExactNumBottomBlobs() const override { return 1; }
  int ExactNumTopBlobs() const override { return 1; }
  void Reshape(const Blobs& bottom, const Blobs& top) override { top[0]->ReshapeLike(*bottom[0]); }

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;
};

}  // namespace hogstream
