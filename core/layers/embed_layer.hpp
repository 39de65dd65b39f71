// Embed: a learned table of input_dim rows of num_output values (blobs_[0], input_dim x
// num_output, weight_filler), looked up by bottom[0]'s values, which must be whole numbers in
// [0, input_dim); with bias_term (default true) a learned num_output-vector (bias_filler) is
// added. The top's shape is the bottom's with num_output appended. No gradient to the indices.
#pragma once

#include <vector>

#include "core/layer.hpp"

namespace hogstream {

class EmbedLayer : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "Embed"; }
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
  int Index(float v, int i) const;  // Error unless v is a whole number in [0, input_dim)
  int num_output_ = 0, input_dim_ = 0;
  bool bias_ = false;
};

}  // namespace hogstream
