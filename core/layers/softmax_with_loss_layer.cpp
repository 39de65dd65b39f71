// SoftmaxWithLoss layer: softmax, then the normalised negative log-likelihood.
#include "core/layers/softmax_with_loss_layer.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>

#include "core/math.hpp"

namespace hogstream {

void SoftmaxWithLossLayer::LayerSetUp(const Blobs& bottom, const Blobs& top) {
  pb::LayerParameter p;
  p.set_name(param_.name());
  p.set_type("Softmax");
  *p.mutable_softmax_param() = SoftmaxParam();
  softmax_ = std::make_unique<SoftmaxLayer>(p);
  softmax_->SetUp({bottom[0]}, {&prob_});
  const pb::LossParameter& lp = param_.loss_param();
  normalization_ = ResolveNormalization(lp, pb::LossParameter::VALID);
  has_ignore_label_ = lp.has_ignore_label();
  ignore_label_ = lp.ignore_label();
}

void SoftmaxWithLossLayer::Reshape(const Blobs& bottom, const Blobs& top) {
  LossLayer::Reshape(bottom, top);
  softmax_->Reshape({bottom[0]}, {&prob_});
  const Blob& b = *bottom[0];
  const int axis = b.CanonicalAxisIndex(SoftmaxParam().axis());
  outer_ = b.count(0, axis);
  channels_ = b.shape(axis);
  inner_ = b.count(axis + 1);
  HS_REQUIRE(bottom[1]->count() == outer_ * inner_)
      << "label count " << bottom[1]->count() << " (shape " << bottom[1]->shape_string()
      << ") must equal the number of predictions " << outer_ * inner_ << " of scores "
      << b.shape_string() << " over axis " << axis;
  if (top.size() > 1) top[1]->ReshapeLike(b);
}

// prob(o, c, i) is at (o * channels_ + c) * inner_ + i; label(o, i) at o * inner_ + i.
void SoftmaxWithLossLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  softmax_->Forward({bottom[0]}, {&prob_});
  const float* prob = prob_.cpu_data();
  const float* label = bottom[1]->cpu_data();
  double loss = 0;
  int valid = 0;
  for (int o = 0; o < outer_; ++o)
    for (int i = 0; i < inner_; ++i) {
      const float lf = label[o * inner_ + i];
      const int l = LabelValue(lf);
      if (Ignored(l)) continue;
      CheckLabel(lf, l, channels_, o, i, inner_ > 1);
      loss -= std::log(std::max(prob[(o * channels_ + l) * inner_ + i], FLT_MIN));
      ++valid;
    }
  top[0]->mutable_cpu_data()[0] =
      static_cast<float>(loss / LossNormalizer(normalization_, outer_, inner_, valid));
  if (top.size() > 1) top[1]->ShareData(prob_);
}

// d loss / d score = prob - onehot(label), zero at ignored positions, times the loss weight
// (top 0's diff) over the normaliser.
void SoftmaxWithLossLayer::Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                                        const Blobs& bottom) {
  HS_REQUIRE(!propagate_down[1]) << "SoftmaxWithLoss cannot backpropagate to the labels";
  if (!propagate_down[0]) return;
  float* dx = bottom[0]->mutable_cpu_diff();
  copy(prob_.count(), prob_.cpu_data(), dx);
  const float* label = bottom[1]->cpu_data();
  int valid = 0;
  for (int o = 0; o < outer_; ++o)
    for (int i = 0; i < inner_; ++i) {
      const int l = static_cast<int>(label[o * inner_ + i]);
      if (Ignored(l)) {
        for (int c = 0; c < channels_; ++c) dx[(o * channels_ + c) * inner_ + i] = 0.f;
      } else {
        dx[(o * channels_ + l) * inner_ + i] -= 1.f;
        ++valid;
      }
    }
  scal(prob_.count(),
       top[0]->cpu_diff()[0] / LossNormalizer(normalization_, outer_, inner_, valid), dx);
}

HS_REGISTER_LAYER(SoftmaxWithLoss, SoftmaxWithLossLayer);

}  // namespace hogstream
