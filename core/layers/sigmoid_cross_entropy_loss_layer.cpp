// SigmoidCrossEntropyLoss layer, CPU forward and backward.
#include "core/layers/sigmoid_cross_entropy_loss_layer.hpp"

#include <cmath>

namespace hogstream {

void SigmoidCrossEntropyLossLayer::LayerSetUp(const Blobs& bottom, const Blobs& top) {
  const pb::LossParameter& lp = param_.loss_param();
  normalization_ = ResolveNormalization(lp, pb::LossParameter::BATCH_SIZE);
  has_ignore_label_ = lp.has_ignore_label();
  ignore_label_ = lp.ignore_label();
}

void SigmoidCrossEntropyLossLayer::Reshape(const Blobs& bottom, const Blobs& top) {
  LossLayer::Reshape(bottom, top);
  HS_REQUIRE(bottom[0]->count() == bottom[1]->count())
      << "inputs " << bottom[0]->shape_string() << " and targets "
      << bottom[1]->shape_string() << " must have the same count";
}

// With p = sigmoid(x), -(t log p + (1 - t) log(1 - p)) equals
//   -(x (t - [x >= 0]) - log(1 + exp(x - 2 x [x >= 0]))),
// whose exp argument is never positive.
void SigmoidCrossEntropyLossLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  const float* x = bottom[0]->cpu_data();
  const float* t = bottom[1]->cpu_data();
  const int n = bottom[0]->count();
  double loss = 0;
  int valid = 0;
  for (int i = 0; i < n; ++i) {
    if (Ignored(t[i])) continue;
    const float pos = x[i] >= 0.f ? 1.f : 0.f;
    loss -= x[i] * (t[i] - pos) - std::log1p(std::exp(x[i] - 2.f * x[i] * pos));
    ++valid;
  }
  normalizer_ =
      LossNormalizer(normalization_, bottom[0]->shape(0), bottom[0]->count(1), valid);
  top[0]->mutable_cpu_data()[0] = static_cast<float>(loss / normalizer_);
}

// d loss / d x = sigmoid(x) - t, zero where ignored, times the loss weight over the normaliser.
void SigmoidCrossEntropyLossLayer::Backward_cpu(const Blobs& top,
                                                const std::vector<bool>& propagate_down,
                                                const Blobs& bottom) {
  HS_REQUIRE(!propagate_down[1])
      << "SigmoidCrossEntropyLoss cannot backpropagate to the targets";
  if (!propagate_down[0]) return;
  const float* x = bottom[0]->cpu_data();
  const float* t = bottom[1]->cpu_data();
  float* dx = bottom[0]->mutable_cpu_diff();
  const int n = bottom[0]->count();
  const float scale = top[0]->cpu_diff()[0] / normalizer_;
  for (int i = 0; i < n; ++i)
    dx[i] = Ignored(t[i]) ? 0.f : scale * (0.5f * std::tanh(0.5f * x[i]) + 0.5f - t[i]);
}

HS_REGISTER_LAYER(SigmoidCrossEntropyLoss, SigmoidCrossEntropyLossLayer);

}  // namespace hogstream
