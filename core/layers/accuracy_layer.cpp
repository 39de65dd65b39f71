// Accuracy layer: top-k and per-class accuracy on the CPU.
#include "core/layers/accuracy_layer.hpp"

namespace hogstream {

void AccuracyLayer::Reshape(const Blobs& bottom, const Blobs& top) {
  const Blob& b = *bottom[0];
  const auto& p = param_.accuracy_param();
  HS_REQUIRE(p.axis() >= -b.num_axes() && p.axis() < b.num_axes())
      << "accuracy axis " << p.axis() << " out of range for scores of shape " << b.shape_string();
  const int axis = b.CanonicalAxisIndex(p.axis());
  outer_ = b.count(0, axis);
  channels_ = b.shape(axis);
  inner_ = b.count(axis + 1);
  HS_REQUIRE(bottom[1]->count() == outer_ * inner_)
      << "label count " << bottom[1]->count() << " (shape " << bottom[1]->shape_string()
      << ") must equal the number of predictions " << outer_ * inner_ << " of scores "
      << b.shape_string() << " over axis " << axis;
  HS_REQUIRE(p.top_k() >= 1 && p.top_k() <= static_cast<unsigned>(channels_))
      << "top_k " << p.top_k() << " must be in [1, " << channels_ << "], the number of classes";
  top[0]->Reshape(std::vector<int>{});
  if (top.size() > 1) top[1]->Reshape(std::vector<int>{channels_});
}

// score(o, c, i) is at (o * channels_ + c) * inner_ + i; label(o, i) at o * inner_ + i.
void AccuracyLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  const auto& p = param_.accuracy_param();
  const int top_k = static_cast<int>(p.top_k());
  const float* score = bottom[0]->cpu_data();
  const float* label = bottom[1]->cpu_data();
  std::vector<int> seen(channels_, 0), hit(channels_, 0);
  int count = 0, correct = 0;
  for (int o = 0; o < outer_; ++o)
    for (int i = 0; i < inner_; ++i) {
      const float lf = label[o * inner_ + i];
      const int l = LabelValue(lf);
      if (p.has_ignore_label() && l == p.ignore_label()) continue;
      CheckLabel(lf, l, channels_, o, i, inner_ > 1);
      const float* s = score + o * channels_ * inner_ + i;
      const float true_score = s[l * inner_];
      int rivals = 0;  // other classes scoring at least as high as the true one
      for (int c = 0; c < channels_ && rivals < top_k; ++c)
        rivals += c != l && s[c * inner_] >= true_score;
      ++count;
      ++seen[l];
      if (rivals < top_k) {
        ++correct;
        ++hit[l];
      }
    }
  top[0]->mutable_cpu_data()[0] = count ? static_cast<float>(correct) / count : 0.f;
  if (top.size() > 1) {
    float* per_class = top[1]->mutable_cpu_data();
    for (int c = 0; c < channels_; ++c)
      per_class[c] = seen[c] ? static_cast<float>(hit[c]) / seen[c] : 0.f;
  }
}

void AccuracyLayer::Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                                 const Blobs& bottom) {
  for (bool p : propagate_down) HS_REQUIRE(!p) << "Accuracy has no gradient";
}

HS_REGISTER_LAYER(Accuracy, AccuracyLayer);

}  // namespace hogstream
