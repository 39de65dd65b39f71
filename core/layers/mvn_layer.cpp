// MVN layer, CPU passes, group by group (sums in double). Backward, with y the output and g its
// gradient in one group of d values: without variance, dx = g - mean(g); with it,
// dx = (g - mean(g) - y * mean(g * y)) / (std + eps) (the derivative with eps taken as
// negligible beside std, as Caffe's layer does).
#include "core/layers/mvn_layer.hpp"

#include <cmath>

namespace hogstream {

void MVNLayer::Reshape(const Blobs& bottom, const Blobs& top) {
  const Blob& x = *bottom[0];
  HS_REQUIRE(x.num_axes() >= 1) << "needs an input with a sample axis";
  const int num = x.shape(0);
  const int channels = x.num_axes() > 1 ? x.shape(1) : 1;
  groups_ = param_.mvn_param().across_channels() ? num : num * channels;
  dim_ = groups_ ? static_cast<int>(x.count() / groups_) : 0;
  top[0]->ReshapeLike(x);
  scale_.assign(groups_, 1.f);
}

void MVNLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  const auto& p = param_.mvn_param();
  const float* x = bottom[0]->cpu_data();
  float* y = top[0]->mutable_cpu_data();
  for (int g = 0; g < groups_; ++g) {
    const float* xg = x + static_cast<size_t>(g) * dim_;
    float* yg = y + static_cast<size_t>(g) * dim_;
    double sum = 0;
    for (int i = 0; i < dim_; ++i) sum += xg[i];
    const double mean = sum / dim_;
    double sq = 0;
    for (int i = 0; i < dim_; ++i) sq += (xg[i] - mean) * (xg[i] - mean);
    const float s = p.normalize_variance() ? static_cast<float>(1.0 / (std::sqrt(sq / dim_) + p.eps())) : 1.f;
    scale_[g] = s;
    for (int i = 0; i < dim_; ++i) yg[i] = static_cast<float>(xg[i] - mean) * s;
  }
}

void MVNLayer::Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                            const Blobs& bottom) {
  if (!propagate_down[0]) return;
  const bool variance = param_.mvn_param().normalize_variance();
  const float* y = top[0]->cpu_data();
  const float* dy = top[0]->cpu_diff();
  float* dx = bottom[0]->mutable_cpu_diff();
  for (int g = 0; g < groups_; ++g) {
    const size_t at = static_cast<size_t>(g) * dim_;
    double sum = 0, sum_gy = 0;
    for (int i = 0; i < dim_; ++i) {
      sum += dy[at + i];
      sum_gy += double{dy[at + i]} * y[at + i];
    }
    const float mean = static_cast<float>(sum / dim_);
    const float mean_gy = variance ? static_cast<float>(sum_gy / dim_) : 0.f;
    for (int i = 0; i < dim_; ++i)
      dx[at + i] = (dy[at + i] - mean - y[at + i] * mean_gy) * scale_[g];
  }
}

HS_REGISTER_LAYER(MVN, MVNLayer);

}  // namespace hogstream
