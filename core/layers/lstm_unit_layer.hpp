// LSTMUnit: one step of an LSTM cell, as Caffe's. Bottoms: c_prev (1 x N x D), the gate
// pre-activations (1 x N x 4D, in the order input i, forward f, output o, candidate g) and
// cont (1 x N: 0 cuts the previous cell state). Tops: c = cont f c_prev + i g and
// h = o tanh(c), each 1 x N x D, with i, f, o sigmoids and g a tanh. No learned blobs; no
// gradient flows to cont (asked for one, Backward refuses).
#pragma once

#include <vector>

#include "core/layer.hpp"

namespace hogstream {

class LSTMUnitLayer : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "LSTMUnit"; }
  int ExactNumBottomBlobs() const override { return 3; }
  int ExactNumTopBlobs() const override { return 2; }
  bool AllowForceBackward(int bottom_index) const override { return bottom_index != 2; }
  void Reshape(const Blobs& bottom, const Blobs& top) override;

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;

 private:
  int N_ = 0, D_ = 0;
  std::vector<float> acts_;  // N x 4D: i, f, o, g after their non-linearities
};

}  // namespace hogstream
