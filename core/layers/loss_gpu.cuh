// Shared by the GPU loss layers (core/layers/*.cu).
#pragma once

#include "core/proto/hogstream.pb.h"

namespace hogstream {

// LossNormalizer (core/layers/loss_layer.cpp) on the device, mode by mode.
__device__ inline float DeviceLossNormalizer(int mode, int outer, int inner, int valid) {
  float n = 1.f;
  if (mode == pb::LossParameter::FULL) n = static_cast<float>(outer) * inner;
  if (mode == pb::LossParameter::VALID) n = static_cast<float>(valid);
  if (mode == pb::LossParameter::BATCH_SIZE) n = static_cast<float>(outer);
  return fmaxf(1.f, n);
}

}  // namespace hogstream
