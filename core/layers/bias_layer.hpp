// Bias: y = x + b, with b broadcast over bottom[0] from `axis` on, as Caffe's layer. b is a
// learned blob (shape: the num_axes axes of bottom[0] from `axis`; -1 = all the rest; filled by
// `filler`, default constant 0) or, with two bottoms, bottom[1] (any shape matching bottom[0]
// from `axis`; a scalar when it has no axes). Works in place.
#pragma once

#include <vector>

#include "core/layer.hpp"

namespace hogstream {

class BiasLayer : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "Bias"; }
  int MinBottomBlobs() const override { return 1; }
  int MaxBottomBlobs() const override { return 2; }
  int ExactNumTopBlobs() const override { return 1; }
  void LayerSetUp(const Blobs& bottom, const Blobs& top) override;
  void Reshape(const Blobs& bottom, const Blobs& top) override;

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;

 private:
  // bottom[0] as outer_ x bias_dim_ x inner_, b indexed by the middle dimension.
  int outer_ = 0, bias_dim_ = 0, inner_ = 0;
};

}  // namespace hogstream
