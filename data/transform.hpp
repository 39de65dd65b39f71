// DataTransformer: Caffe's per-example preprocessing of a raw Datum into floats —
// value = (pixel - mean) * scale, with an optional crop (random in TRAIN, centred in TEST)
// and an optional random horizontal mirror (either phase, as Caffe). Not an image decoder: encoded
// (JPEG/PNG) Datums are decoded before they get here (data/image.hpp's DecodeDatum, which also
// applies force_color/force_gray); one that is not is refused.
#pragma once

#include <random>
#include <vector>

#include "core/proto/hogstream.pb.h"

namespace hogstream {

// Immutable after construction, so reader threads may share one; each brings its own RNG.
class DataTransformer {
 public:
  // Reads mean_file now. Errors: mean_file together with mean_value, an unreadable mean file,
  // or one that is not 1 x C x H x W.
  DataTransformer(const pb::TransformationParameter& param, pb::Phase phase);

  // Checks that `datum` can be transformed (raw, data size C*H*W, fits the crop, matches the
  // mean) and returns the output shape {C, H', W'}. Messages say what is wrong, not where:
  // callers add the source and key.
  std::vector<int> OutputShape(const pb::Datum& datum) const;
  // Writes C * H' * W' floats to `out`; crop offsets and the mirror coin come from `rng`.
  void Transform(const pb::Datum& datum, float* out, std::mt19937& rng) const;

 private:
  pb::TransformationParameter param_;
  pb::Phase phase_;
  std::vector<float> mean_;      // C*H*W values from mean_file, else empty
  std::vector<int> mean_shape_;  // {C, H, W} of mean_
};

}  // namespace hogstream
