// ArgMax: the indices of the top_k (default 1) largest values along `axis`, or, with no axis,
// over each item's values (all axes after the first). With out_max_val the values come too: with
// an axis only the values (top: the bottom's shape with top_k on the axis); without one both
// (top: N x 2 x top_k, indices then values; N x 1 x top_k without out_max_val; padded with unit
// axes to the bottom's number of axes). Equal values: the higher index first, as Caffe's sort.
// No gradient: asking for one is an error, as in Caffe.
#pragma once

#include <vector>

#include "core/layer.hpp"

namespace hogstream {

class ArgMaxLayer : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "ArgMax"; }
  int ExactNumBottomBlobs() const override { return 1; }
  int ExactNumTopBlobs() const override { return 1; }
  bool AllowForceBackward(int) const override { return false; }
  void LayerSetUp(const Blobs& bottom, const Blobs& top) override;
  void Reshape(const Blobs& bottom, const Blobs& top) override;

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;

 private:
  int axis_ = -1;  // -1: no axis
  int top_k_ = 1;
};

}  // namespace hogstream
