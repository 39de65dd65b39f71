// Split: hands one bottom to several consumers. Every top shares the bottom's data; each keeps
// its own diff, and Backward sums them into the bottom's diff. The Net inserts these wherever
// a blob feeds more than one layer.
#pragma once

#include "core/layer.hpp"

namespace hogstream {

class SplitLayer : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "Split"; }
  Layouts LayoutSupport() const override { return Layouts::kAny; }
  int ExactNumBottomBlobs() const override { return 1; }
  int MinTopBlobs() const override { return 1; }
  void Reshape(const Blobs& bottom, const Blobs& top) override;

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;
};

}  // namespace hogstream
