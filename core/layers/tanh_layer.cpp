// TanH layer, CPU forward and backward.
#include "core/layers/tanh_layer.hpp"

#include <cmath>

namespace hogstream {

void TanHLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  const float* x = bottom[0]->cpu_data();
  float* y = top[0]->mutable_cpu_data();
  const int n = bottom[0]->count();
  for (int i = 0; i < n; ++i) y[i] = std::tanh(x[i]);
}

void TanHLayer::Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                             const Blobs& bottom) {
  if (!propagate_down[0]) return;
  const float* y = top[0]->cpu_data();
  const float* dy = top[0]->cpu_diff();
  float* dx = bottom[0]->mutable_cpu_diff();
  const int n = bottom[0]->count();
  for (int i = 0; i < n; ++i) dx[i] = dy[i] * (1.f - y[i] * y[i]);
}

HS_REGISTER_LAYER(TanH, TanHLayer);

}  // namespace hogstream
