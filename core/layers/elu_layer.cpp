// ELU layer, CPU forward and backward.
#include "core/layers/elu_layer.hpp"

#include <cmath>

namespace hogstream {

void ELULayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  const float alpha = param_.elu_param().alpha();
  const float* x = KeepInput(bottom, top);
  float* y = top[0]->mutable_cpu_data();
  const int n = bottom[0]->count();
  for (int i = 0; i < n; ++i) y[i] = x[i] > 0.f ? x[i] : alpha * std::expm1(x[i]);
}

// dy/dx = 1 for x > 0, alpha * exp(x) = alpha + y otherwise. `v` is x, or in place with
// alpha >= 0 y itself, which is positive exactly where x is.
void ELULayer::Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                            const Blobs& bottom) {
  if (!propagate_down[0]) return;
  const float alpha = param_.elu_param().alpha();
  const float* v = KeptInput(top, bottom);
  const float* y = top[0]->cpu_data();
  const float* dy = top[0]->cpu_diff();
  float* dx = bottom[0]->mutable_cpu_diff();
  const int n = bottom[0]->count();
  for (int i = 0; i < n; ++i) dx[i] = v[i] > 0.f ? dy[i] : (alpha + y[i]) * dy[i];
}

HS_REGISTER_LAYER(ELU, ELULayer);

}  // namespace hogstream
