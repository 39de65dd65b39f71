#include "core/layers/dropout_layer.hpp"

#include "core/math.hpp"

namespace hogstream {

void DropoutLayer::LayerSetUp(const Blobs& bottom, const Blobs& top) {
  ratio_ = param_.dropout_param().dropout_ratio();
  HS_REQUIRE(ratio_ >= 0.f && ratio_ < 1.f)
      << "dropout_ratio must be in [0, 1), got " << ratio_;
  scale_ = 1.f / (1.f - ratio_);
}

void DropoutLayer::Reshape(const Blobs& bottom, const Blobs& top) {
  NeuronLayer::Reshape(bottom, top);
  if (phase_ == pb::TRAIN) mask_.resize(bottom[0]->count());
}

void DropoutLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  const int n = bottom[0]->count();
  const float* x = bottom[0]->cpu_data();
  float* y = top[0]->mutable_cpu_data();
  if (phase_ != pb::TRAIN) {
    if (bottom[0] != top[0]) copy(n, x, y);
    return;
  }
  rng_bernoulli(n, 1.f - ratio_, mask_.data());
  for (int i = 0; i < n; ++i) y[i] = x[i] * mask_[i] * scale_;
}

void DropoutLayer::Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                                const Blobs& bottom) {
  if (!propagate_down[0]) return;
  const int n = bottom[0]->count();
  const float* dy = top[0]->cpu_diff();
  float* dx = bottom[0]->mutable_cpu_diff();
  if (phase_ != pb::TRAIN) {
    if (bottom[0] != top[0]) copy(n, dy, dx);
    return;
  }
  for (int i = 0; i < n; ++i) dx[i] = dy[i] * mask_[i] * scale_;
}

HS_REGISTER_LAYER(Dropout, DropoutLayer);

}  // namespace hogstream
