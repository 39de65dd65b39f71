// Tile: the bottom repeated `tiles` times along `axis` (the whole block of axes from `axis` on
// is repeated, as Caffe's layer does): top shape is the bottom's with shape[axis] * tiles.
#pragma once

#include <vector>

#include "core/layer.hpp"

namespace hogstream {

class TileLayer : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "Tile"; }
  int ExactNumBottomBlobs() const override { return 1; }
  int ExactNumTopBlobs() const override { return 1; }
  void LayerSetUp(const Blobs& bottom, const Blobs& top) override;
  void Reshape(const Blobs& bottom, const Blobs& top) override;

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;

 private:
  int axis_ = 1, tiles_ = 1;
  int outer_ = 0, inner_ = 0;  // counts before the axis, and from it on
};

}  // namespace hogstream
