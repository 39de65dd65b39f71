// BatchReindex: top item i is bottom[0]'s item bottom[1][i] (a 1-d blob of indices, as
// floats): a gather along the first axis, so items may repeat or be left out. The gradient
// of each item is the sum over the top items taken from it; the indices get none.
#pragma once

#include <vector>

#include "core/layer.hpp"

namespace hogstream {

class BatchReindexLayer : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "BatchReindex"; }
  int ExactNumBottomBlobs() const override { return 2; }
  int ExactNumTopBlobs() const override { return 1; }
  bool AllowForceBackward(int bottom_index) const override { return bottom_index == 0; }
  void Reshape(const Blobs& bottom, const Blobs& top) override;

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;

 private:
  // The index of top item i, checked against bottom[0]'s item count (one line if outside).
  int Index(const Blobs& bottom, int i) const;
};

}  // namespace hogstream
