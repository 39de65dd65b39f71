#include "core/layers/relu_layer.hpp"

#include <algorithm>

namespace hogstream {

void ReLULayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  if (fused_) return;  // done by the BatchNorm before it
  const float slope = param_.relu_param().negative_slope();
  const float* x = bottom[0]->cpu_data();
  float* y = top[0]->mutable_cpu_data();
  const int n = bottom[0]->count();
  if (slope == 0.f) {
    for (int i = 0; i < n; ++i) y[i] = std::max(x[i], 0.f);
  } else {
    for (int i = 0; i < n; ++i) y[i] = x[i] > 0.f ? x[i] : slope * x[i];
  }
}

// In place, bottom data is the top data: the sign of y equals the sign of x (slope >= 0),
// so testing y > 0 is correct either way.
void ReLULayer::Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                             const Blobs& bottom) {
  if (!propagate_down[0] || fused_) return;
  const float slope = param_.relu_param().negative_slope();
  const float* y = top[0]->cpu_data();
  const float* dy = top[0]->cpu_diff();
  float* dx = bottom[0]->mutable_cpu_diff();
  const int n = bottom[0]->count();
  for (int i = 0; i < n; ++i) dx[i] = y[i] > 0.f ? dy[i] : slope * dy[i];
}

HS_REGISTER_LAYER(ReLU, ReLULayer);

}  // namespace hogstream
