// AbsVal layer, CPU forward and backward.
#include "core/layers/absval_layer.hpp"

#include <cmath>

namespace hogstream {

void AbsValLayer::LayerSetUp(const Blobs& bottom, const Blobs& top) {
  HS_REQUIRE(bottom[0] != top[0])
      << "AbsVal cannot work in place (its gradient needs the input's sign): give it a new top";
}

void AbsValLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  const float* x = bottom[0]->cpu_data();
  float* y = top[0]->mutable_cpu_data();
  const int n = bottom[0]->count();
  for (int i = 0; i < n; ++i) y[i] = std::fabs(x[i]);
}

// d|x|/dx = sign(x), taken as 0 at x = 0 (Caffe's choice).
void AbsValLayer::Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                               const Blobs& bottom) {
  if (!propagate_down[0]) return;
  const float* x = bottom[0]->cpu_data();
  const float* dy = top[0]->cpu_diff();
  float* dx = bottom[0]->mutable_cpu_diff();
  const int n = bottom[0]->count();
  for (int i = 0; i < n; ++i) {
    const float sign = static_cast<float>((x[i] > 0.f) - (x[i] < 0.f));
    dx[i] = sign * dy[i];
  }
}

HS_REGISTER_LAYER(AbsVal, AbsValLayer);

}  // namespace hogstream
