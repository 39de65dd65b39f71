// MVN (mean-variance normalisation): each sample's values, per channel (or over all its
// channels with across_channels), shifted to mean 0 and, with normalize_variance (the
// default), divided by their standard deviation plus eps: y = (x - mean) / (sqrt(var) + eps).
// Axis 0 is the sample, axis 1 the channel, the rest the values normalised together.
#pragma once

#include <vector>

#include "core/layer.hpp"

namespace hogstream {

class MVNLayer : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "MVN"; }
  int ExactNumBottomBlobs() const override { return 1; }
  int ExactNumTopBlobs() const override { return 1; }
  void Reshape(const Blobs& bottom, const Blobs& top) override;

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;

 private:
  int groups_ = 0, dim_ = 0;  // groups normalised separately, values in each
  std::vector<float> scale_;  // per group: 1 / (std + eps) (1 without normalize_variance)
};

}  // namespace hogstream
