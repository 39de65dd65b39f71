// Silence layer: backward writes zero gradients to the bottoms that ask for one.
#include "core/layers/silence_layer.hpp"

#include "core/math.hpp"

namespace hogstream {

void SilenceLayer::Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                                const Blobs& bottom) {
  for (size_t i = 0; i < bottom.size(); ++i)
    if (propagate_down[i]) set(bottom[i]->count(), 0.f, bottom[i]->mutable_cpu_diff());
}

HS_REGISTER_LAYER(Silence, SilenceLayer);

}  // namespace hogstream
