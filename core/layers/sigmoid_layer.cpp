// Sigmoid layer, CPU forward and backward.
#include "core/layers/sigmoid_layer.hpp"

#include <cmath>

namespace hogstream {

// The tanh form is Caffe's: it saturates cleanly at both ends, with no exp overflow.
void SigmoidLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  const float* x = bottom[0]->cpu_data();
  float* y = top[0]->mutable_cpu_data();
  const int n = bottom[0]->count();
  for (int i = 0; i < n; ++i) y[i] = 0.5f * std::tanh(0.5f * x[i]) + 0.5f;
}

void SigmoidLayer::Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                                const Blobs& bottom) {
  if (!propagate_down[0]) return;
  const float* y = top[0]->cpu_data();
  const float* dy = top[0]->cpu_diff();
  float* dx = bottom[0]->mutable_cpu_diff();
  const int n = bottom[0]->count();
  for (int i = 0; i < n; ++i) dx[i] = dy[i] * y[i] * (1.f - y[i]);
}

HS_REGISTER_LAYER(Sigmoid, SigmoidLayer);

}  // namespace hogstream
