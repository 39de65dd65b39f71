// Caffe's recurrent layers, RNN and LSTM, run directly: the input projection of all T steps in
// one GEMM, then a loop over time with one GEMM per step for the recurrent product, and
// backpropagation through time in reverse (no unrolled net inside).
//
// Bottoms, as Caffe's: x (T x N x ...: time steps, then N independent streams; the features
// are the axes after the first two), cont (T x N: 0 where a sequence starts, which cuts the
// recurrence there, 1 elsewhere), optionally x_static (N x ...), then with
// recurrent_param.expose_hidden the initial state(s), each 1 x N x num_output (RNN: h_0;
// LSTM: h_0, c_0). Tops: T x N x num_output, then with expose_hidden the final state(s) in the
// same order. Without expose_hidden the final state of one Forward is the initial state of the
// next (zero at first and whenever N changes), as in Caffe, so cont = 1 at a batch's first
// step continues the previous batch's sequences; no gradient crosses batches.
//
//   RNN:  h_t = tanh(W_hh (cont_t h_{t-1}) + W_xh x_t + b_h [+ W_xh_static x_static])
//         o_t = tanh(W_ho h_t + b_o)                                        top = o
//         learned blobs: W_xh (H x D), b_h (H), [W_xh_static (H x S)], W_hh, W_ho (H x H), b_o
//   LSTM: [i f o g] = W_xc x_t + b_c [+ W_xc_static x_static] + W_hc (cont_t h_{t-1})
//         (i, f, o sigmoid, g tanh); c_t = cont_t f c_{t-1} + i g;  h_t = o tanh(c_t); top = h
//         learned blobs: W_xc (4H x D), b_c (4H), [W_xc_static (4H x S)], W_hc (4H x H)
// Weights are filled with recurrent_param.weight_filler, biases with bias_filler. No gradient
// flows to cont: asked for one, Backward refuses.
//
// Where this differs from Caffe's unrolled-net implementation (every Caffe model still loads
// and runs): the gradients of the exposed final states (tops 1..) flow back through time and
// the exposed initial states (bottoms) receive theirs, where Caffe's layer shares only their
// data with its inner net and drops both; the number of time steps may change between passes
// (Caffe refuses); and debug_info, which prints Caffe's inner net, is accepted and ignored.
#pragma once

#include <string>
#include <vector>

#include "core/layer.hpp"

namespace hogstream {

// What RNN and LSTM share: bottom and top bookkeeping, shape checks, the carried state.
class RecurrentLayer : public Layer {
 public:
  using Layer::Layer;
  int MinBottomBlobs() const override;
  int MaxBottomBlobs() const override { return MinBottomBlobs() + 1; }
  int ExactNumTopBlobs() const override;
  bool AllowForceBackward(int bottom_index) const override { return bottom_index != 1; }
  void LayerSetUp(const Blobs& bottom, const Blobs& top) override;
  void Reshape(const Blobs& bottom, const Blobs& top) override;

 protected:
  // How many state blobs run from step to step (RNN 1: h; LSTM 2: h, c).
  virtual int NumStates() const = 0;
  // Rows of each weight matrix (RNN H, LSTM 4H).
  virtual int GateDim() const = 0;
  // Creates and fills blobs_ (called when none were given).
  virtual void MakeBlobs() = 0;
  // Refuses a gradient for cont (one line naming the layer).
  void RequireNoContGradient(const std::vector<bool>& propagate_down) const;
  bool expose() const { return param_.recurrent_param().expose_hidden(); }
  int StateBottom(int k) const { return 2 + (static_ ? 1 : 0) + k; }
  // The initial state k (1 x N x H) for this Forward: the exposed bottom or the carried one.
  const float* InitialState(const Blobs& bottom, int k) const;
  // After Forward: the final state k becomes top 1 + k, or is carried to the next Forward.
  void SaveFinalState(const float* state, const Blobs& top, int k);

  int T_ = 0, N_ = 0, H_ = 0, D_ = 0, S_ = 0;  // steps, streams, outputs, input and static dims
  bool static_ = false;
  std::vector<std::vector<float>> carried_;  // per state: N x H, the last final state
};

class RNNLayer : public RecurrentLayer {
 public:
  using RecurrentLayer::RecurrentLayer;
  const char* type() const override { return "RNN"; }

 protected:
  int NumStates() const override { return 1; }
  int GateDim() const override { return H_; }
  void MakeBlobs() override;
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;

 private:
  std::vector<float> h_;      // T x N x H hidden states
  std::vector<float> o_;      // T x N x H outputs (a copy: the top may be changed in place)
  std::vector<float> hcont_;  // T x N x H: cont_t h_{t-1}, what W_hh multiplies
  std::vector<float> h0_;     // N x H, the initial state this Forward used
  std::vector<float> da_, dh_;  // T x N x H scratch: gradients of pre-activations, of h
};

class LSTMLayer : public RecurrentLayer {
 public:
  using RecurrentLayer::RecurrentLayer;
  const char* type() const override { return "LSTM"; }

 protected:
  int NumStates() const override { return 2; }
  int GateDim() const override { return 4 * H_; }
  void MakeBlobs() override;
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;

 private:
  std::vector<float> gates_;  // T x N x 4H: i, f, o, g after their non-linearities
  std::vector<float> c_;      // T x N x H cell states
  std::vector<float> hcont_;  // T x N x H: cont_t h_{t-1}, what W_hc multiplies
  std::vector<float> h0_, c0_;
  std::vector<float> dg_;     // T x N x 4H scratch: gradients of the gate pre-activations
};

}  // namespace hogstream
