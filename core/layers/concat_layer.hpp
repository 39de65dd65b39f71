// Concat: joins its bottoms along one axis (`axis`, or the legacy `concat_dim`); every other
// axis must agree. With a single bottom the top shares its memory.
#pragma once

#include "core/layer.hpp"

namespace hogstream {

class ConcatLayer : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "Concat"; }
  int MinBottomBlobs() const override { return 1; }
  int ExactNumTopBlobs() const override { return 1; }
  void LayerSetUp(const Blobs& bottom, const Blobs& top) override;
  void Reshape(const Blobs& bottom, const Blobs& top) override;

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;


 // Protected for the GPU twins (core/layers/*.cu), which derive from this class.
 protected:
  int axis_ = 1;
  int outer_ = 0, inner_ = 0;  // counts before and after the axis
};

}  // namespace hogstream
