// Scale: y = x * s (+ b), with s broadcast over bottom[0] from `axis` on, as Caffe's layer.
// s is a learned blob (shape: the num_axes axes of bottom[0] from `axis`; -1 = all the rest;
// filled by `filler`, default 1) or, with two bottoms, bottom[1] (any shape matching bottom[0]
// from `axis`; a scalar when it has no axes). bias_term adds a learned b of s's shape (filled
// by bias_filler, default 0), as Caffe's fused Bias layer does. Works in place.
#pragma once

#include <vector>

#include "core/layer.hpp"

namespace hogstream {

class BatchNormLayer;

class ScaleLayer : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "Scale"; }
  // Fused, its passes are the BatchNorm's, which take the blocked layout.
  Layouts LayoutSupport() const override { return bn_ ? Layouts::kAny : Layouts::kPlain; }
  int MinBottomBlobs() const override { return 1; }
  int MaxBottomBlobs() const override { return 2; }
  int ExactNumTopBlobs() const override { return 1; }
  void LayerSetUp(const Blobs& bottom, const Blobs& top) override;
  void Reshape(const Blobs& bottom, const Blobs& top) override;

  // Fusion into the BatchNorm before it (see batch_norm_layer.hpp): whether this is a learned
  // scale of one value per channel (axis 1) of `x`; the bias blob (null without bias_term);
  // FuseInto hands the work to `bn` (this layer's passes are then skipped).
  bool PerChannelOf(const Blob& x) const;
  Blob* bias() const { return bias_index_ >= 0 ? blobs_[bias_index_].get() : nullptr; }
  void FuseInto(BatchNormLayer* bn);

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;

 protected:  // (and the GPU twin's, batch_norm_layer.cu)
  int bias_index_ = -1;  // the bias blob's index in blobs_, -1 without bias_term
  // bottom[0] as outer_ x scale_dim_ x inner_, s indexed by the middle dimension.
  int outer_ = 0, scale_dim_ = 0, inner_ = 0;
  Blob bottom_copy_;  // in place: the input, which the scale gradient needs
  BatchNormLayer* bn_ = nullptr;  // fused into this BatchNorm
};

}  // namespace hogstream
