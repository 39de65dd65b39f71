// Clip layer, CPU forward and backward.
#include "core/layers/clip_layer.hpp"

#include <algorithm>
#include <cmath>

namespace hogstream {

void ClipLayer::LayerSetUp(const Blobs& bottom, const Blobs& top) {
  const pb::ClipParameter& p = param_.clip_param();
  HS_REQUIRE(p.has_min() && p.has_max()) << "Clip needs both clip_param.min and clip_param.max";
  HS_REQUIRE(!std::isnan(p.min()) && !std::isnan(p.max()) && p.min() <= p.max())
      << "clip_param.min (" << p.min() << ") must not exceed clip_param.max (" << p.max() << ")";
}

void ClipLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  const float lo = param_.clip_param().min(), hi = param_.clip_param().max();
  const float* x = KeepInput(bottom, top);
  float* y = top[0]->mutable_cpu_data();
  const int n = bottom[0]->count();
  for (int i = 0; i < n; ++i) y[i] = std::min(std::max(x[i], lo), hi);
}

// The bounds themselves pass the gradient, as in Caffe.
void ClipLayer::Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                             const Blobs& bottom) {
  if (!propagate_down[0]) return;
  const float lo = param_.clip_param().min(), hi = param_.clip_param().max();
  const float* x = KeptInput(top, bottom);
  const float* dy = top[0]->cpu_diff();
  float* dx = bottom[0]->mutable_cpu_diff();
  const int n = bottom[0]->count();
  for (int i = 0; i < n; ++i) dx[i] = x[i] >= lo && x[i] <= hi ? dy[i] : 0.f;
}

HS_REGISTER_LAYER(Clip, ClipLayer);

}  // namespace hogstream
