// Softmax over one axis (softmax_param.axis, default 1; negative counts from the end), for
// every position of the axes before and after it. Subtracts the maximum first, so large
// scores do not overflow. Works in place (backward reads the top's data).
#pragma once

#include "core/layer.hpp"

namespace hogstream {

class SoftmaxLayer : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "Softmax"; }
  int ExactNumBottomBlobs() const override { return 1; }
  int ExactNumTopBlobs() const override { return 1; }
  void Reshape(const Blobs& bottom, const Blobs& top) override;

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;


 // Protected for the GPU twins (core/layers/*.cu), which derive from this class.
 protected:
  int outer_ = 0, channels_ = 0, inner_ = 0;  // the blob as outer x channels x inner
};

}  // namespace hogstream
