// MultinomialLogisticLoss layer, CPU forward and backward.
#include "core/layers/multinomial_logistic_loss_layer.hpp"

#include <algorithm>
#include <cmath>

namespace hogstream {

void MultinomialLogisticLossLayer::Reshape(const Blobs& bottom, const Blobs& top) {
  LossLayer::Reshape(bottom, top);
  HS_REQUIRE(bottom[1]->count() == bottom[0]->shape(0))
      << "MultinomialLogisticLoss wants one label per item: labels "
      << bottom[1]->shape_string() << " for probabilities " << bottom[0]->shape_string();
}

void MultinomialLogisticLossLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  const int num = bottom[0]->shape(0);
  const int dim = bottom[0]->count() / num;
  const float* prob = bottom[0]->cpu_data();
  const float* label = bottom[1]->cpu_data();
  double loss = 0;
  for (int n = 0; n < num; ++n) {
    const int l = LabelValue(label[n]);
    CheckLabel(label[n], l, dim, n, 0, false);
    loss -= std::log(std::max(prob[n * dim + l], kLogThreshold));
  }
  top[0]->mutable_cpu_data()[0] = static_cast<float>(loss / num);
}

// d loss / d p[n, label_n] = -1 / (N max(p, threshold)), scaled by the loss weight; zero
// elsewhere.
void MultinomialLogisticLossLayer::Backward_cpu(const Blobs& top,
                                                const std::vector<bool>& propagate_down,
                                                const Blobs& bottom) {
  HS_REQUIRE(!propagate_down[1])
      << "MultinomialLogisticLoss cannot backpropagate to the labels";
  if (!propagate_down[0]) return;
  const int num = bottom[0]->shape(0);
  const int dim = bottom[0]->count() / num;
  const float* prob = bottom[0]->cpu_data();
  const float* label = bottom[1]->cpu_data();
  float* dx = bottom[0]->mutable_cpu_diff();
  std::fill(dx, dx + bottom[0]->count(), 0.f);
  const float scale = top[0]->cpu_diff()[0] / num;
  for (int n = 0; n < num; ++n) {
    const int l = static_cast<int>(label[n]);
    dx[n * dim + l] = -scale / std::max(prob[n * dim + l], kLogThreshold);
  }
}

HS_REGISTER_LAYER(MultinomialLogisticLoss, MultinomialLogisticLossLayer);

}  // namespace hogstream
