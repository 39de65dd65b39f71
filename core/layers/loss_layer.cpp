// LossLayer shape checks and the loss normaliser shared by the loss layers.
#include "core/layers/loss_layer.hpp"

#include <algorithm>

namespace hogstream {

void LossLayer::Reshape(const Blobs& bottom, const Blobs& top) {
  HS_REQUIRE(bottom[0]->num_axes() > 0 && bottom[1]->num_axes() > 0 &&
             bottom[0]->shape(0) == bottom[1]->shape(0))
      << "predictions " << bottom[0]->shape_string() << " and labels "
      << bottom[1]->shape_string() << " must have the same first dimension";
  top[0]->Reshape(std::vector<int>{});
}

NormalizationMode ResolveNormalization(const pb::LossParameter& p, NormalizationMode fallback) {
  if (p.has_normalization()) return p.normalization();
  if (p.has_normalize())
    return p.normalize() ? pb::LossParameter::VALID : pb::LossParameter::BATCH_SIZE;
  return fallback;
}

}  // namespace hogstream
