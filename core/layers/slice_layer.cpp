// Slice layer, CPU passes: each top is a run of the bottom's axis, copied block by block.
#include "core/layers/slice_layer.hpp"

#include <algorithm>

#include "core/math.hpp"

namespace hogstream {

void SliceLayer::LayerSetUp(const Blobs& bottom, const Blobs& top) {
  const pb::SliceParameter& p = param_.slice_param();
  HS_REQUIRE(!(p.has_axis() && p.has_slice_dim()))
      << "give either axis or slice_dim, not both";
  HS_REQUIRE(p.slice_point_size() == 0 || p.slice_point_size() == static_cast<int>(top.size()) - 1)
      << p.slice_point_size() << " slice_point(s) for " << top.size()
      << " tops; give one fewer than the tops, or none for equal parts";
}

void SliceLayer::Reshape(const Blobs& bottom, const Blobs& top) {
  const pb::SliceParameter& p = param_.slice_param();
  const Blob& x = *bottom[0];
  const int axes = x.num_axes();
  if (p.has_slice_dim()) {
    HS_REQUIRE(p.slice_dim() < static_cast<unsigned>(axes))
        << "slice_dim " << p.slice_dim() << " is out of range for input " << x.shape_string();
    axis_ = static_cast<int>(p.slice_dim());
  } else {
    axis_ = x.InputAxisIndex(p.axis());
  }
  const int len = x.shape(axis_);
  const int tops = static_cast<int>(top.size());
  std::vector<int> sizes;
  if (p.slice_point_size() > 0) {
    int prev = 0;
    for (int i = 0; i < p.slice_point_size(); ++i) {
      const unsigned point = p.slice_point(i);
      HS_REQUIRE(point > static_cast<unsigned>(prev) && point < static_cast<unsigned>(len))
          << "slice_point " << point << " must be above the one before (" << prev
          << ") and below the axis length " << len << " of input " << x.shape_string();
      sizes.push_back(static_cast<int>(point) - prev);
      prev = static_cast<int>(point);
    }
    sizes.push_back(len - prev);
  } else {
    HS_REQUIRE(len % tops == 0) << "axis " << axis_ << " of input " << x.shape_string()
                                << " (length " << len << ") does not split into " << tops
                                << " equal parts; give slice_point";
    sizes.assign(tops, len / tops);
  }
  outer_ = x.count(0, axis_);
  inner_ = x.count(axis_ + 1);
  std::vector<int> shape = x.shape();
  for (int t = 0; t < tops; ++t) {
    shape[axis_] = sizes[t];
    top[t]->Reshape(shape);
  }
  if (tops == 1) {
    top[0]->ShareData(x);
    top[0]->ShareDiff(x);
  }
}

void SliceLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  if (top.size() == 1) return;
  const int len = bottom[0]->shape(axis_);
  const float* x = bottom[0]->cpu_data();
  int offset = 0;  // along the axis
  for (Blob* t : top) {
    const int n = t->shape(axis_) * inner_;
    float* y = t->mutable_cpu_data();
    for (int o = 0; o < outer_; ++o)
      copy(n, x + (static_cast<size_t>(o) * len + offset) * inner_, y + static_cast<size_t>(o) * n);
    offset += t->shape(axis_);
  }
}

void SliceLayer::Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                              const Blobs& bottom) {
  if (top.size() == 1 || !propagate_down[0]) return;
  const int len = bottom[0]->shape(axis_);
  float* dx = bottom[0]->mutable_cpu_diff();
  int offset = 0;
  for (Blob* t : top) {
    const int n = t->shape(axis_) * inner_;
    const float* dy = t->cpu_diff();
    for (int o = 0; o < outer_; ++o)
      copy(n, dy + static_cast<size_t>(o) * n, dx + (static_cast<size_t>(o) * len + offset) * inner_);
    offset += t->shape(axis_);
  }
}

HS_REGISTER_LAYER(Slice, SliceLayer);

}  // namespace hogstream
