// HingeLoss layer, CPU forward and backward.
#include "core/layers/hinge_loss_layer.hpp"

#include <algorithm>

namespace hogstream {

void HingeLossLayer::Reshape(const Blobs& bottom, const Blobs& top) {
  LossLayer::Reshape(bottom, top);
  HS_REQUIRE(bottom[1]->count() == bottom[0]->shape(0))
      << "HingeLoss wants one label per item: labels " << bottom[1]->shape_string()
      << " for scores " << bottom[0]->shape_string();
  margin_.ReshapeLike(*bottom[0]);
}

void HingeLossLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  const int num = bottom[0]->shape(0);
  const int dim = bottom[0]->count() / num;
  const float* x = bottom[0]->cpu_data();
  const float* label = bottom[1]->cpu_data();
  float* m = margin_.mutable_cpu_data();
  const bool l2 = param_.hinge_loss_param().norm() == pb::HingeLossParameter::L2;
  double loss = 0;
  for (int n = 0; n < num; ++n) {
    const int l = LabelValue(label[n]);
    CheckLabel(label[n], l, dim, n, 0, false);
    for (int c = 0; c < dim; ++c) {
      const float t = c == l ? 1.f : -1.f;
      const float v = std::max(0.f, 1.f - t * x[n * dim + c]);
      m[n * dim + c] = v;
      loss += l2 ? double(v) * v : v;
    }
  }
  top[0]->mutable_cpu_data()[0] = static_cast<float>(loss / num);
}

// d/dx of the term for class c is -t [margin > 0] (L1) or -2 t margin (L2), times the loss
// weight over N.
void HingeLossLayer::Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                                  const Blobs& bottom) {
  HS_REQUIRE(!propagate_down[1]) << "HingeLoss cannot backpropagate to the labels";
  if (!propagate_down[0]) return;
  const int num = bottom[0]->shape(0);
  const int dim = bottom[0]->count() / num;
  const float* label = bottom[1]->cpu_data();
  const float* m = margin_.cpu_data();
  float* dx = bottom[0]->mutable_cpu_diff();
  const bool l2 = param_.hinge_loss_param().norm() == pb::HingeLossParameter::L2;
  const float scale = top[0]->cpu_diff()[0] / num;
  for (int n = 0; n < num; ++n) {
    const int l = static_cast<int>(label[n]);
    for (int c = 0; c < dim; ++c) {
      const float t = c == l ? 1.f : -1.f;
      const float v = m[n * dim + c];
      const float g = l2 ? 2.f * v : (v > 0.f ? 1.f : 0.f);
      dx[n * dim + c] = -t * g * scale;
    }
  }
}

HS_REGISTER_LAYER(HingeLoss, HingeLossLayer);

}  // namespace hogstream
