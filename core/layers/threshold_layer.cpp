// Threshold layer, CPU forward; backward only refuses.
#include "core/layers/threshold_layer.hpp"

namespace hogstream {

void ThresholdLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  const float t = param_.threshold_param().threshold();
  const float* x = bottom[0]->cpu_data();
  float* y = top[0]->mutable_cpu_data();
  const int n = bottom[0]->count();
  for (int i = 0; i < n; ++i) y[i] = x[i] > t ? 1.f : 0.f;
}

void ThresholdLayer::Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                                  const Blobs& bottom) {
  HS_REQUIRE(!propagate_down[0])
      << "layer '" << param_.name() << "' (Threshold) has no gradient (nor has Caffe's) but "
      << "a gradient is asked of it; set propagate_down: false on it";
}

HS_REGISTER_LAYER(Threshold, ThresholdLayer);

}  // namespace hogstream
