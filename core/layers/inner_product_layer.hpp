// InnerProduct (fully connected): flattens the bottom from `axis` on into K features and maps
// them to num_output. Weights are num_output x K, or K x num_output with `transpose`.
#pragma once

#include "core/layer.hpp"

namespace hogstream {

class InnerProductLayer : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "InnerProduct"; }
  int ExactNumBottomBlobs() const override { return 1; }
  int ExactNumTopBlobs() const override { return 1; }
  void LayerSetUp(const Blobs& bottom, const Blobs& top) override;
  void Reshape(const Blobs& bottom, const Blobs& top) override;

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;


 // Protected for the GPU twins (core/layers/*.cu), which derive from this class.
 protected:
  int M_ = 0, K_ = 0, N_ = 0;  // rows (outer count), features in, features out
  bool bias_term_ = true, transpose_ = false;
};

}  // namespace hogstream
