// Slice: cuts its bottom along one axis (`axis`, or the legacy `slice_dim`) into its tops, at
// `slice_point`s (one fewer than the tops, strictly increasing, inside the axis) or, with none,
// into equal parts. With a single top the top shares the bottom's memory.
#pragma once

#include <vector>

#include "core/layer.hpp"

namespace hogstream {

class SliceLayer : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "Slice"; }
  int ExactNumBottomBlobs() const override { return 1; }
  int MinTopBlobs() const override { return 1; }
  void LayerSetUp(const Blobs& bottom, const Blobs& top) override;
  void Reshape(const Blobs& bottom, const Blobs& top) override;

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;

 private:
  int axis_ = 1;
  int outer_ = 0, inner_ = 0;  // counts before and after the axis
};

}  // namespace hogstream
