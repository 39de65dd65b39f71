// Input: the net's entry point for data the caller supplies. input_param gives one shape for
// every top, or one per top (or none, when the caller shapes the tops); the layer computes
// nothing.
#pragma once

#include "core/layer.hpp"

namespace hogstream {

class InputLayer : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "Input"; }
  int ExactNumBottomBlobs() const override { return 0; }
  int MinTopBlobs() const override { return 1; }
  void LayerSetUp(const Blobs& bottom, const Blobs& top) override;
  // The tops keep whatever shape the caller gives them.
  void Reshape(const Blobs& bottom, const Blobs& top) override {}

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override {}
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override {}
};

}  // namespace hogstream
