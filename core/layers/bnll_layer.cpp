// BNLL layer, CPU forward and backward.
#include "core/layers/bnll_layer.hpp"

#include <algorithm>
#include <cmath>

namespace hogstream {

// max(x, 0) + log(1 + exp(-|x|)): exp never overflows, and for large |x| the result is x or
// a tiny positive number, not inf or 0.
void BNLLLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  const float* x = bottom[0]->cpu_data();
  float* y = top[0]->mutable_cpu_data();
  const int n = bottom[0]->count();
  for (int i = 0; i < n; ++i) y[i] = std::max(x[i], 0.f) + std::log1p(std::exp(-std::fabs(x[i])));
}

// dy/dx = sigmoid(x) = 1 - exp(-y), since exp(-y) = 1 / (1 + exp(x)).
void BNLLLayer::Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                             const Blobs& bottom) {
  if (!propagate_down[0]) return;
  const float* y = top[0]->cpu_data();
  const float* dy = top[0]->cpu_diff();
  float* dx = bottom[0]->mutable_cpu_diff();
  const int n = bottom[0]->count();
  for (int i = 0; i < n; ++i) dx[i] = -std::expm1(-y[i]) * dy[i];
}

HS_REGISTER_LAYER(BNLL, BNLLLayer);

}  // namespace hogstream
