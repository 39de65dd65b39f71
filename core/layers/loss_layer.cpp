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

float LossNormalizer(NormalizationMode mode, int outer, int inner, int valid) {
  float n = 1.f;
  switch (mode) {
    case pb::LossParameter::FULL: n = static_cast<float>(outer) * inner; break;
    case pb::LossParameter::VALID: n = static_cast<float>(valid); break;
    case pb::LossParameter::BATCH_SIZE: n = static_cast<float>(outer); break;
    case pb::LossParameter::NONE: n = 1.f; break;
  }
  return std::max(1.f, n);
}

}  // namespace hogstream
