// Tile layer, CPU passes: forward copies each outer block `tiles` times; backward sums the
// copies' gradients.
#include "core/layers/tile_layer.hpp"

#include "core/math.hpp"

namespace hogstream {

void TileLayer::LayerSetUp(const Blobs& bottom, const Blobs& top) {
  const pb::TileParameter& p = param_.tile_param();
  HS_REQUIRE(p.has_tiles()) << "tile_param.tiles must be given";
  HS_REQUIRE(p.tiles() > 0) << "tile_param.tiles must be positive; got " << p.tiles();
  tiles_ = p.tiles();
}

void TileLayer::Reshape(const Blobs& bottom, const Blobs& top) {
  const Blob& x = *bottom[0];
  axis_ = x.InputAxisIndex(param_.tile_param().axis());
  std::vector<int64_t> dims(x.shape().begin(), x.shape().end());
  dims[axis_] *= tiles_;
  top[0]->Reshape(CheckedShape(dims, "top '" + (param_.top_size() ? param_.top(0) : "") + "'"));
  outer_ = x.count(0, axis_);
  inner_ = x.count(axis_);
}

void TileLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  const float* x = bottom[0]->cpu_data();
  float* y = top[0]->mutable_cpu_data();
  for (int o = 0; o < outer_; ++o) {
    for (int t = 0; t < tiles_; ++t) {
      copy(inner_, x, y);
      y += inner_;
    }
    x += inner_;
  }
}

void TileLayer::Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                             const Blobs& bottom) {
  if (!propagate_down[0]) return;
  const float* dy = top[0]->cpu_diff();
  float* dx = bottom[0]->mutable_cpu_diff();
  for (int o = 0; o < outer_; ++o) {
    copy(inner_, dy, dx);
    dy += inner_;
    for (int t = 1; t < tiles_; ++t) {
      axpy(inner_, 1.f, dy, dx);
      dy += inner_;
    }
    dx += inner_;
  }
}

HS_REGISTER_LAYER(Tile, TileLayer);

}  // namespace hogstream
