// Power layer, CPU forward and backward.
#include "core/layers/power_layer.hpp"

#include <cmath>

namespace hogstream {

void PowerLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  const pb::PowerParameter& p = param_.power_param();
  const float power = p.power(), scale = p.scale(), shift = p.shift();
  const float* x = KeepInput(bottom, top);
  float* y = top[0]->mutable_cpu_data();
  const int n = bottom[0]->count();
  if (power == 1.f) {
    for (int i = 0; i < n; ++i) y[i] = shift + scale * x[i];
  } else if (power == 2.f) {
    for (int i = 0; i < n; ++i) {
      const float u = shift + scale * x[i];
      y[i] = u * u;
    }
  } else {
    for (int i = 0; i < n; ++i) y[i] = std::pow(shift + scale * x[i], power);
  }
}

// dy/dx = power * scale * (shift + scale * x)^(power - 1), from x rather than as y / u (which
// is 0/0 where u = 0 though the derivative is 0 for power > 1).
void PowerLayer::Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                              const Blobs& bottom) {
  if (!propagate_down[0]) return;
  const pb::PowerParameter& p = param_.power_param();
  const float power = p.power(), scale = p.scale(), shift = p.shift();
  const float k = power * scale;
  const float* x = KeptInput(top, bottom);
  const float* dy = top[0]->cpu_diff();
  float* dx = bottom[0]->mutable_cpu_diff();
  const int n = bottom[0]->count();
  if (k == 0.f) {  // y does not depend on x
    for (int i = 0; i < n; ++i) dx[i] = 0.f;
  } else if (power == 1.f) {
    for (int i = 0; i < n; ++i) dx[i] = k * dy[i];
  } else if (power == 2.f) {
    for (int i = 0; i < n; ++i) dx[i] = k * (shift + scale * x[i]) * dy[i];
  } else {
    for (int i = 0; i < n; ++i) dx[i] = k * std::pow(shift + scale * x[i], power - 1.f) * dy[i];
  }
}

HS_REGISTER_LAYER(Power, PowerLayer);

}  // namespace hogstream
