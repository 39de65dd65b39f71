// EuclideanLoss layer, CPU forward and backward.
#include "core/layers/euclidean_loss_layer.hpp"

#include "core/math.hpp"

namespace hogstream {

void EuclideanLossLayer::Reshape(const Blobs& bottom, const Blobs& top) {
  LossLayer::Reshape(bottom, top);
  HS_REQUIRE(bottom[0]->count(1) == bottom[1]->count(1))
      << "inputs " << bottom[0]->shape_string() << " and " << bottom[1]->shape_string()
      << " must have the same size per item";
  diff_.ReshapeLike(*bottom[0]);
}

void EuclideanLossLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  const int n = bottom[0]->count();
  vsub(n, bottom[0]->cpu_data(), bottom[1]->cpu_data(), diff_.mutable_cpu_data());
  const float* d = diff_.cpu_data();
  top[0]->mutable_cpu_data()[0] = dot(n, d, d) / bottom[0]->shape(0) / 2.f;
}

void EuclideanLossLayer::Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                                      const Blobs& bottom) {
  for (int i = 0; i < 2; ++i) {
    if (!propagate_down[i]) continue;
    const float sign = i == 0 ? 1.f : -1.f;
    scale(diff_.count(), sign * top[0]->cpu_diff()[0] / bottom[i]->shape(0), diff_.cpu_data(),
          bottom[i]->mutable_cpu_diff());
  }
}

HS_REGISTER_LAYER(EuclideanLoss, EuclideanLossLayer);

}  // namespace hogstream
