#include "core/layers/concat_layer.hpp"

#include "core/math.hpp"

namespace hogstream {

void ConcatLayer::LayerSetUp(const Blobs& bottom, const Blobs& top) {
  const pb::ConcatParameter& p = param_.concat_param();
  HS_REQUIRE(!(p.has_axis() && p.has_concat_dim()))
      << "give either axis or concat_dim, not both";
}

void ConcatLayer::Reshape(const Blobs& bottom, const Blobs& top) {
  const pb::ConcatParameter& p = param_.concat_param();
  const Blob& first = *bottom[0];
  const int axes = first.num_axes();
  if (p.has_concat_dim()) {
    HS_REQUIRE(p.concat_dim() < static_cast<unsigned>(axes))
        << "concat_dim " << p.concat_dim() << " is out of range for input "
        << first.shape_string();
    axis_ = static_cast<int>(p.concat_dim());
  } else {
    axis_ = first.InputAxisIndex(p.axis());
  }
  std::vector<int> shape = first.shape();
  for (size_t i = 1; i < bottom.size(); ++i) {
    const Blob& b = *bottom[i];
    bool fits = b.num_axes() == axes;
    for (int j = 0; fits && j < axes; ++j) fits = j == axis_ || b.shape(j) == shape[j];
    HS_REQUIRE(fits) << "bottoms must agree on every axis but " << axis_ << ": bottom 0 is "
                     << first.shape_string() << ", bottom " << i << " is " << b.shape_string();
    shape[axis_] += b.shape(axis_);
  }
  top[0]->Reshape(shape);
  outer_ = first.count(0, axis_);
  inner_ = first.count(axis_ + 1);
  if (bottom.size() == 1) {
    top[0]->ShareData(first);
    top[0]->ShareDiff(first);
  }
}

void ConcatLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  if (bottom.size() == 1) return;
  const int top_axis = top[0]->shape(axis_);
  float* y = top[0]->mutable_cpu_data();
  int offset = 0;  // along the axis
  for (Blob* b : bottom) {
    const int len = b->shape(axis_) * inner_;
    const float* x = b->cpu_data();
    for (int o = 0; o < outer_; ++o) copy(len, x + o * len, y + (o * top_axis + offset) * inner_);
    offset += b->shape(axis_);
  }
}

void ConcatLayer::Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                               const Blobs& bottom) {
  if (bottom.size() == 1) return;
  const int top_axis = top[0]->shape(axis_);
  const float* dy = top[0]->cpu_diff();
  int offset = 0;
  for (size_t i = 0; i < bottom.size(); ++i) {
    Blob* b = bottom[i];
    const int len = b->shape(axis_) * inner_;
    if (propagate_down[i]) {
      float* dx = b->mutable_cpu_diff();
      for (int o = 0; o < outer_; ++o)
        copy(len, dy + (o * top_axis + offset) * inner_, dx + o * len);
    }
    offset += b->shape(axis_);
  }
}

HS_REGISTER_LAYER(Concat, ConcatLayer);

}  // namespace hogstream
