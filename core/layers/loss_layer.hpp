// LossLayer: what the loss layers share, as in Caffe — two bottoms (predictions, then labels
// or targets), one scalar top weighted 1 by default, no gradient forced onto the labels — and
// the normaliser their loss_param selects.
#pragma once

#include "core/layer.hpp"

namespace hogstream {

class LossLayer : public Layer {
 public:
  using Layer::Layer;
  int ExactNumBottomBlobs() const override { return 2; }
  int ExactNumTopBlobs() const override { return 1; }
  bool AutoTopBlobs() const override { return true; }
  bool IsLoss() const override { return true; }
  bool AllowForceBackward(int bottom_index) const override { return bottom_index != 1; }
  // Requires bottoms agreeing in their first dimension; shapes top 0 as a scalar.
  void Reshape(const Blobs& bottom, const Blobs& top) override;
};

using NormalizationMode = pb::LossParameter::NormalizationMode;

// The mode loss_param asks for: `normalization` when set, else the legacy `normalize`
// (true = VALID, false = BATCH_SIZE) when set, else `fallback`.
NormalizationMode ResolveNormalization(const pb::LossParameter& p, NormalizationMode fallback);

// What the summed loss is divided by: FULL outer*inner, VALID the `valid` (non-ignored)
// count, BATCH_SIZE outer, NONE 1; never below 1, so a batch whose labels are all ignored
// gives a zero loss rather than NaN. The GPU loss kernels call it too.
#ifdef __CUDACC__
__host__ __device__
#endif
inline float LossNormalizer(NormalizationMode mode, int outer, int inner, int valid) {
  float n = 1.f;
  switch (mode) {
    case pb::LossParameter::FULL: n = static_cast<float>(outer) * inner; break;
    case pb::LossParameter::VALID: n = static_cast<float>(valid); break;
    case pb::LossParameter::BATCH_SIZE: n = static_cast<float>(outer); break;
    case pb::LossParameter::NONE: n = 1.f; break;
  }
  return n > 1.f ? n : 1.f;
}

}  // namespace hogstream
