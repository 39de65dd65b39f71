// Filter: the items (first-axis entries) of each bottom but the last whose selector (the
// last bottom: one value per item, shape (N) or (N, 1, ...)) is non-zero, in order. Tops are
// one fewer than bottoms, each the selected items of its bottom; the item count follows the
// selector on every pass (zero items: an empty top). Gradients go back to the selected items
// (the others get zero); the selector gets none.
#pragma once

#include <vector>

#include "core/layer.hpp"

namespace hogstream {

class FilterLayer : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "Filter"; }
  int MinBottomBlobs() const override { return 2; }
  int MinTopBlobs() const override { return 1; }
  bool AllowForceBackward(int bottom_index) const override;
  void LayerSetUp(const Blobs& bottom, const Blobs& top) override;
  void Reshape(const Blobs& bottom, const Blobs& top) override;

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;

 private:
  std::vector<int> kept_;  // items selected on this pass
  int selector_ = 0;       // bottom index of the selector
};

}  // namespace hogstream
