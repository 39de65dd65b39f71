// Exp layer, CPU forward and backward.
#include "core/layers/exp_layer.hpp"

#include <cmath>

namespace hogstream {

void ExpLayer::LayerSetUp(const Blobs& bottom, const Blobs& top) {
  const pb::ExpParameter& p = param_.exp_param();
  const float base = p.base();
  HS_REQUIRE(base == -1.f || (base > 0.f && std::isfinite(base)))
      << "exp_param.base must be positive and finite, or -1 for e; got " << base;
  const double ln_base = base == -1.f ? 1.0 : std::log(static_cast<double>(base));
  inner_ = static_cast<float>(ln_base * p.scale());
  outer_ = static_cast<float>(std::exp(ln_base * p.shift()));
}

void ExpLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  const float* x = bottom[0]->cpu_data();
  float* y = top[0]->mutable_cpu_data();
  const int n = bottom[0]->count();
  for (int i = 0; i < n; ++i) y[i] = outer_ * std::exp(inner_ * x[i]);
}

// dy/dx = inner_ * y.
void ExpLayer::Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                            const Blobs& bottom) {
  if (!propagate_down[0]) return;
  const float* y = top[0]->cpu_data();
  const float* dy = top[0]->cpu_diff();
  float* dx = bottom[0]->mutable_cpu_diff();
  const int n = bottom[0]->count();
  for (int i = 0; i < n; ++i) dx[i] = inner_ * y[i] * dy[i];
}

HS_REGISTER_LAYER(Exp, ExpLayer);

}  // namespace hogstream
