// ContrastiveLoss layer, CPU forward and backward.
#include "core/layers/contrastive_loss_layer.hpp"

#include <algorithm>
#include <cmath>

#include "core/math.hpp"

namespace hogstream {

void ContrastiveLossLayer::Reshape(const Blobs& bottom, const Blobs& top) {
  LossLayer::Reshape(bottom, top);
  HS_REQUIRE(bottom[0]->shape() == bottom[1]->shape())
      << "ContrastiveLoss inputs " << bottom[0]->shape_string() << " and "
      << bottom[1]->shape_string() << " must have the same shape";
  HS_REQUIRE(bottom[2]->count() == bottom[0]->shape(0))
      << "ContrastiveLoss wants one similarity label per pair: labels "
      << bottom[2]->shape_string() << " for inputs " << bottom[0]->shape_string();
  diff_.ReshapeLike(*bottom[0]);
  dist_sq_.Reshape(std::vector<int>{bottom[0]->shape(0)});
}

void ContrastiveLossLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  const int num = bottom[0]->shape(0);
  const int dim = bottom[0]->count() / num;
  vsub(diff_.count(), bottom[0]->cpu_data(), bottom[1]->cpu_data(), diff_.mutable_cpu_data());
  const float* d = diff_.cpu_data();
  const float* y = bottom[2]->cpu_data();
  float* dsq = dist_sq_.mutable_cpu_data();
  const pb::ContrastiveLossParameter& p = param_.contrastive_loss_param();
  const float margin = p.margin();
  double loss = 0;
  for (int n = 0; n < num; ++n) {
    dsq[n] = dot(dim, d + n * dim, d + n * dim);
    if (static_cast<int>(y[n])) {
      loss += dsq[n];
    } else if (p.legacy_version()) {
      loss += std::max(margin - dsq[n], 0.f);
    } else {
      const float m = std::max(margin - std::sqrt(dsq[n]), 0.f);
      loss += double(m) * m;
    }
  }
  top[0]->mutable_cpu_data()[0] = static_cast<float>(loss / num / 2.0);
}

// Per item, d/da: similar (a - b); dissimilar, while inside the margin, -(a - b) (legacy) or
// -(margin - d) / (d + 1e-4) (a - b); times the loss weight over N. d/db is the opposite.
void ContrastiveLossLayer::Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                                        const Blobs& bottom) {
  HS_REQUIRE(!propagate_down[2])
      << "ContrastiveLoss cannot backpropagate to the similarity labels";
  const int num = bottom[0]->shape(0);
  const int dim = bottom[0]->count() / num;
  const float* d = diff_.cpu_data();
  const float* y = bottom[2]->cpu_data();
  const float* dsq = dist_sq_.cpu_data();
  const pb::ContrastiveLossParameter& p = param_.contrastive_loss_param();
  const float margin = p.margin();
  for (int b = 0; b < 2; ++b) {
    if (!propagate_down[b]) continue;
    const float alpha = (b == 0 ? 1.f : -1.f) * top[0]->cpu_diff()[0] / num;
    float* dx = bottom[b]->mutable_cpu_diff();
    for (int n = 0; n < num; ++n) {
      float coef;
      if (static_cast<int>(y[n])) {
        coef = alpha;
      } else if (p.legacy_version()) {
        coef = margin - dsq[n] > 0.f ? -alpha : 0.f;
      } else {
        const float dist = std::sqrt(dsq[n]);
        const float m = margin - dist;
        coef = m > 0.f ? -alpha * m / (dist + 1e-4f) : 0.f;
      }
      scale(dim, coef, d + n * dim, dx + n * dim);
    }
  }
}

HS_REGISTER_LAYER(ContrastiveLoss, ContrastiveLossLayer);

}  // namespace hogstream
