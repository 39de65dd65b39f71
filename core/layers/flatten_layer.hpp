// Flatten: merges axes [axis, end_axis] of the bottom into one. The top is a view: Forward
// points its data at the bottom's and Backward points the bottom's diff at the top's, so
// nothing is copied. Not in place.
#pragma once

#include "core/layer.hpp"

namespace hogstream {

class FlattenLayer : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "Flatten"; }
  int ExactNumBottomBlobs() const override { return 1; }
  int ExactNumTopBlobs() const override { return 1; }
  void Reshape(const Blobs& bottom, const Blobs& top) override;

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override {
    top[0]->ShareData(*bottom[0]);
  }
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override {
    bottom[0]->ShareDiff(*top[0]);
  }
};

}  // namespace hogstream
