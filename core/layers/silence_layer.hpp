// Silence: takes bottoms that nothing else reads (so the net reports no unused outputs) and
// produces no tops; its gradient to them is zero.
#pragma once

#include <vector>

#include "core/layer.hpp"

namespace hogstream {

class SilenceLayer : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "Silence"; }
  int MinBottomBlobs() const override { return 1; }
  int ExactNumTopBlobs() const override { return 0; }
  void Reshape(const Blobs& bottom, const Blobs& top) override {}

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override {}
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;
};

}  // namespace hogstream
