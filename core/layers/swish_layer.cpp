// Swish layer, CPU forward and backward.
#include "core/layers/swish_layer.hpp"

#include <cmath>

namespace hogstream {

void SwishLayer::Reshape(const Blobs& bottom, const Blobs& top) {
  NeuronLayer::Reshape(bottom, top);
  sigmoid_.ReshapeLike(*bottom[0]);
}

void SwishLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  const float beta = param_.swish_param().beta();
  const float* x = bottom[0]->cpu_data();
  float* s = sigmoid_.mutable_cpu_data();
  float* y = top[0]->mutable_cpu_data();
  const int n = bottom[0]->count();
  for (int i = 0; i < n; ++i) {
    s[i] = 0.5f * std::tanh(0.5f * beta * x[i]) + 0.5f;  // sigmoid without exp overflow
    y[i] = x[i] * s[i];
  }
}

// dy/dx = s + beta * x * s * (1 - s) = beta * y + s * (1 - beta * y).
void SwishLayer::Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                              const Blobs& bottom) {
  if (!propagate_down[0]) return;
  const float beta = param_.swish_param().beta();
  const float* y = top[0]->cpu_data();
  const float* s = sigmoid_.cpu_data();
  const float* dy = top[0]->cpu_diff();
  float* dx = bottom[0]->mutable_cpu_diff();
  const int n = bottom[0]->count();
  for (int i = 0; i < n; ++i) dx[i] = (beta * y[i] + s[i] * (1.f - beta * y[i])) * dy[i];
}

HS_REGISTER_LAYER(Swish, SwishLayer);

}  // namespace hogstream
