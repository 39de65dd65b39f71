// Reduction layer, CPU passes: sums in double per output value; the gradient of each
// operation written out (SUM, MEAN: coeff; ASUM: coeff * sign(x); SUMSQ: 2 coeff x).
#include "core/layers/reduction_layer.hpp"

#include <cmath>

namespace hogstream {

void ReductionLayer::Reshape(const Blobs& bottom, const Blobs& top) {
  const pb::ReductionParameter& p = param_.reduction_param();
  const Blob& x = *bottom[0];
  const int axis = x.InputAxisIndex(p.axis());
  top[0]->Reshape(std::vector<int>(x.shape().begin(), x.shape().begin() + axis));
  outer_ = x.count(0, axis);
  dim_ = x.count(axis);
  coeff_ = p.coeff();
  if (p.operation() == pb::ReductionParameter::MEAN && dim_ > 0) coeff_ /= dim_;
}

void ReductionLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  const auto op = param_.reduction_param().operation();
  const float* x = bottom[0]->cpu_data();
  float* y = top[0]->mutable_cpu_data();
  for (int o = 0; o < outer_; ++o) {
    const float* v = x + static_cast<size_t>(o) * dim_;
    double sum = 0;
    switch (op) {
      case pb::ReductionParameter::ASUM:
        for (int i = 0; i < dim_; ++i) sum += std::fabs(v[i]);
        break;
      case pb::ReductionParameter::SUMSQ:
        for (int i = 0; i < dim_; ++i) sum += static_cast<double>(v[i]) * v[i];
        break;
      default:  // SUM, MEAN
        for (int i = 0; i < dim_; ++i) sum += v[i];
    }
    y[o] = static_cast<float>(sum * coeff_);
  }
}

void ReductionLayer::Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                                  const Blobs& bottom) {
  if (!propagate_down[0]) return;
  const auto op = param_.reduction_param().operation();
  const float* x = bottom[0]->cpu_data();
  const float* dy = top[0]->cpu_diff();
  float* dx = bottom[0]->mutable_cpu_diff();
  for (int o = 0; o < outer_; ++o) {
    const size_t off = static_cast<size_t>(o) * dim_;
    const float g = dy[o] * coeff_;
    switch (op) {
      case pb::ReductionParameter::ASUM:
        for (int i = 0; i < dim_; ++i)
          dx[off + i] = x[off + i] > 0 ? g : (x[off + i] < 0 ? -g : 0.f);
        break;
      case pb::ReductionParameter::SUMSQ:
        for (int i = 0; i < dim_; ++i) dx[off + i] = 2.f * g * x[off + i];
        break;
      default:
        for (int i = 0; i < dim_; ++i) dx[off + i] = g;
    }
  }
}

HS_REGISTER_LAYER(Reduction, ReductionLayer);

}  // namespace hogstream
