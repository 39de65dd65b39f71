// Split layer: shared data forward, summed diffs backward.
#include "core/layers/split_layer.hpp"

#include "core/math.hpp"

namespace hogstream {

void SplitLayer::Reshape(const Blobs& bottom, const Blobs& top) {
  for (Blob* t : top) {
    HS_REQUIRE(t != bottom[0]) << "Split cannot work in place";
    t->ReshapeLike(*bottom[0]);
  }
}

void SplitLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  for (Blob* t : top) t->ShareData(*bottom[0]);
}

void SplitLayer::Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                              const Blobs& bottom) {
  if (!propagate_down[0]) return;
  const int n = bottom[0]->count();
  float* dx = bottom[0]->mutable_cpu_diff();
  copy(n, top[0]->cpu_diff(), dx);
  for (size_t i = 1; i < top.size(); ++i) axpy(n, 1.f, top[i]->cpu_diff(), dx);
}

HS_REGISTER_LAYER(Split, SplitLayer);

}  // namespace hogstream
