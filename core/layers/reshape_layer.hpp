// Reshape: gives the bottom a new shape without copying; the top shares the bottom's data and
// diff. reshape_param.shape replaces bottom axes [axis, axis + num_axes) (num_axes -1 = to the
// end; a negative axis counts from the end, -1 meaning after the last axis). In the new shape
// 0 copies the bottom's dimension at that position and one -1 may be inferred from the count.
#pragma once

#include "core/layer.hpp"

namespace hogstream {

class ReshapeLayer : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "Reshape"; }
  int ExactNumBottomBlobs() const override { return 1; }
  int ExactNumTopBlobs() const override { return 1; }
  void LayerSetUp(const Blobs& bottom, const Blobs& top) override;
  void Reshape(const Blobs& bottom, const Blobs& top) override;

 protected:
  // The top is a view of the bottom, set up in Reshape; there is nothing to compute.
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override {}
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override {}

 private:
  std::vector<int> copy_axes_;  // positions in the new shape holding 0
  int inferred_axis_ = -1;      // position of the -1, if any
  long long constant_count_ = 1;  // product of the explicit dimensions
};

}  // namespace hogstream
