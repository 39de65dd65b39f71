// InfogainLoss layer: softmax, then the infogain-weighted negative log-likelihood.
#include "core/layers/infogain_loss_layer.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>

#include "core/io.hpp"
#include "core/math.hpp"

namespace hogstream {

void InfogainLossLayer::LayerSetUp(const Blobs& bottom, const Blobs& top) {
  SoftmaxWithLossLayer::LayerSetUp(bottom, top);
  if (bottom.size() < 3) {
    const std::string& source = param_.infogain_loss_param().source();
    HS_REQUIRE(!source.empty())
        << "layer '" << param_.name()
        << "' (InfogainLoss): give the infogain matrix as a third bottom or as "
           "infogain_loss_param.source";
    pb::BlobProto proto;
    ReadBinaryProto(source, &proto);
    infogain_.FromProto(proto);
  }
}

void InfogainLossLayer::Reshape(const Blobs& bottom, const Blobs& top) {
  SoftmaxWithLossLayer::Reshape(bottom, top);
  const Blob& h = Infogain(bottom);
  HS_REQUIRE(h.count() == channels_ * channels_)
      << "layer '" << param_.name() << "' (InfogainLoss): the infogain matrix "
      << h.shape_string() << " must be " << channels_ << " x " << channels_
      << " for scores with " << channels_ << " classes";
}

// prob(o, k, i) is at (o * channels_ + k) * inner_ + i; label(o, i) at o * inner_ + i;
// H(l, k) at l * channels_ + k.
void InfogainLossLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  softmax_->Forward({bottom[0]}, {&prob_});
  const float* prob = prob_.cpu_data();
  const float* label = bottom[1]->cpu_data();
  const float* h = Infogain(bottom).cpu_data();
  double loss = 0;
  int valid = 0;
  for (int o = 0; o < outer_; ++o)
    for (int i = 0; i < inner_; ++i) {
      const float lf = label[o * inner_ + i];
      const int l = LabelValue(lf);
      if (Ignored(l)) continue;
      CheckLabel(lf, l, channels_, o, i, inner_ > 1);
      for (int k = 0; k < channels_; ++k)
        loss -= double(h[l * channels_ + k]) *
                std::log(std::max(prob[(o * channels_ + k) * inner_ + i], FLT_MIN));
      ++valid;
    }
  top[0]->mutable_cpu_data()[0] =
      static_cast<float>(loss / LossNormalizer(normalization_, outer_, inner_, valid));
  if (top.size() > 1) top[1]->ShareData(prob_);
}

// d loss / d score_k = p_k * sum_j H[l, j] - H[l, k], zero at ignored positions, times the
// loss weight over the normaliser.
void InfogainLossLayer::Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                                     const Blobs& bottom) {
  HS_REQUIRE(!propagate_down[1]) << "InfogainLoss cannot backpropagate to the labels";
  HS_REQUIRE(bottom.size() < 3 || !propagate_down[2])
      << "InfogainLoss cannot backpropagate to the infogain matrix";
  if (!propagate_down[0]) return;
  const float* prob = prob_.cpu_data();
  const float* label = bottom[1]->cpu_data();
  const float* h = Infogain(bottom).cpu_data();
  float* dx = bottom[0]->mutable_cpu_diff();
  int valid = 0;
  for (int o = 0; o < outer_; ++o)
    for (int i = 0; i < inner_; ++i) {
      const int l = static_cast<int>(label[o * inner_ + i]);
      if (Ignored(l)) {
        for (int k = 0; k < channels_; ++k) dx[(o * channels_ + k) * inner_ + i] = 0.f;
        continue;
      }
      float row = 0.f;
      for (int k = 0; k < channels_; ++k) row += h[l * channels_ + k];
      for (int k = 0; k < channels_; ++k) {
        const int at = (o * channels_ + k) * inner_ + i;
        dx[at] = prob[at] * row - h[l * channels_ + k];
      }
      ++valid;
    }
  scal(prob_.count(),
       top[0]->cpu_diff()[0] / LossNormalizer(normalization_, outer_, inner_, valid), dx);
}

HS_REGISTER_LAYER(InfogainLoss, InfogainLossLayer);

}  // namespace hogstream
