// Log layer, CPU forward and backward.
#include "core/layers/log_layer.hpp"

#include <cmath>

namespace hogstream {

void LogLayer::LayerSetUp(const Blobs& bottom, const Blobs& top) {
  const float base = param_.log_param().base();
  HS_REQUIRE(base == -1.f || (base > 0.f && base != 1.f && std::isfinite(base)))
      << "log_param.base must be positive, finite and not 1, or -1 for e; got " << base;
  inv_ln_base_ = base == -1.f ? 1.f : static_cast<float>(1.0 / std::log(static_cast<double>(base)));
}

void LogLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  const pb::LogParameter& p = param_.log_param();
  const float scale = p.scale(), shift = p.shift();
  const float* x = KeepInput(bottom, top);
  float* y = top[0]->mutable_cpu_data();
  const int n = bottom[0]->count();
  for (int i = 0; i < n; ++i) y[i] = std::log(shift + scale * x[i]) * inv_ln_base_;
}

// dy/dx = scale / (ln(base) * (shift + scale * x)).
void LogLayer::Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                            const Blobs& bottom) {
  if (!propagate_down[0]) return;
  const pb::LogParameter& p = param_.log_param();
  const float scale = p.scale(), shift = p.shift();
  const float k = scale * inv_ln_base_;
  const float* x = KeptInput(top, bottom);
  const float* dy = top[0]->cpu_diff();
  float* dx = bottom[0]->mutable_cpu_diff();
  const int n = bottom[0]->count();
  for (int i = 0; i < n; ++i) dx[i] = k * dy[i] / (shift + scale * x[i]);
}

HS_REGISTER_LAYER(Log, LogLayer);

}  // namespace hogstream
