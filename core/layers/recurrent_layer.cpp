// RNN and LSTM layers, CPU passes: the input projection of every step in one GEMM, one GEMM
// per step for the recurrent product, and backpropagation through time; the weight gradients
// of all steps are then one GEMM each.
#include "core/layers/recurrent_layer.hpp"

#include <climits>
#include <cmath>

#include "core/filler.hpp"
#include "core/math.hpp"

namespace hogstream {

namespace {

// cont_t * v, where a 0 cuts the recurrence outright (whatever v holds).
inline float Cont(float cont, float v) { return cont == 0.f ? 0.f : cont * v; }

// y[r] += b for each of `rows` rows of `cols` values.
void AddBiasRows(int rows, int cols, const float* b, float* y) {
  for (int r = 0; r < rows; ++r) axpy(cols, 1.f, b, y + static_cast<size_t>(r) * cols);
}

// db += the sum of the `rows` rows of dy.
void SumRows(int rows, int cols, const float* dy, float* db) {
  for (int r = 0; r < rows; ++r) axpy(cols, 1.f, dy + static_cast<size_t>(r) * cols, db);
}

const char* StateName(int states, int k) {
  static const char* const kNames[2][2] = {{"h_0", ""}, {"h_0", "c_0"}};
  return kNames[states - 1][k];
}

}  // namespace

// ---------------------------------------------------------------- shared

int RecurrentLayer::MinBottomBlobs() const {
  return 2 + (param_.recurrent_param().expose_hidden() ? NumStates() : 0);
}

int RecurrentLayer::ExactNumTopBlobs() const {
  return 1 + (param_.recurrent_param().expose_hidden() ? NumStates() : 0);
}

void RecurrentLayer::LayerSetUp(const Blobs& bottom, const Blobs& top) {
  const pb::RecurrentParameter& p = param_.recurrent_param();
  HS_REQUIRE(p.num_output() > 0 && p.num_output() <= static_cast<unsigned>(INT_MAX / 4))
      << "recurrent_param.num_output must be positive; got " << p.num_output();
  H_ = static_cast<int>(p.num_output());
  const Blob& x = *bottom[0];
  HS_REQUIRE(x.num_axes() >= 2) << "x (bottom[0]) must have at least 2 axes (time steps x "
                                << "streams x ...); got shape " << x.shape_string();
  D_ = x.count(2);
  static_ = static_cast<int>(bottom.size()) > MinBottomBlobs();
  if (static_) {
    const Blob& xs = *bottom[2];
    HS_REQUIRE(xs.num_axes() >= 1) << "x_static (bottom[2]) must have a stream axis; got shape "
                                   << xs.shape_string();
    S_ = xs.count(1);
  }
  if (blobs_.empty()) MakeBlobs();
  param_propagate_down_.assign(blobs_.size(), true);
}

void RecurrentLayer::Reshape(const Blobs& bottom, const Blobs& top) {
  const Blob& x = *bottom[0];
  HS_REQUIRE(x.num_axes() >= 2) << "x (bottom[0]) must have at least 2 axes (time steps x "
                                << "streams x ...); got shape " << x.shape_string();
  HS_REQUIRE(x.count(2) == D_) << "x (bottom[0]) of shape " << x.shape_string() << " has "
                               << x.count(2) << " features per step, but the weights take "
                               << D_;
  T_ = x.shape(0);
  const int n = x.shape(1);
  const Blob& cont = *bottom[1];
  HS_REQUIRE(cont.num_axes() == 2 && cont.shape(0) == T_ && cont.shape(1) == n)
      << "cont (bottom[1]) must be T x N = " << T_ << " x " << n
      << " (time steps x streams, as x); got shape " << cont.shape_string();
  if (static_) {
    const Blob& xs = *bottom[2];
    HS_REQUIRE(xs.num_axes() >= 1 && xs.shape(0) == n && xs.count(1) == S_)
        << "x_static (bottom[2]) must be N = " << n << " streams of " << S_
        << " features; got shape " << xs.shape_string();
  }
  const std::vector<int> state_shape{1, n, H_};
  if (expose()) {
    for (int k = 0; k < NumStates(); ++k) {
      const Blob& s = *bottom[StateBottom(k)];
      HS_REQUIRE(s.shape() == state_shape)
          << StateName(NumStates(), k) << " (bottom[" << StateBottom(k)
          << "]) must be 1 x N x num_output = " << ShapeString(state_shape) << "; got shape "
          << s.shape_string();
    }
  }
  top[0]->Reshape(CheckedShape({T_, n, H_}, "top '" + (param_.top_size() ? param_.top(0) : "") + "'"));
  for (int k = 0; k < ExactNumTopBlobs() - 1; ++k) top[1 + k]->Reshape(state_shape);
  if (n != N_ || static_cast<int>(carried_.size()) != NumStates()) {
    carried_.assign(NumStates(), std::vector<float>(static_cast<size_t>(n) * H_, 0.f));
  }
  N_ = n;
}

void RecurrentLayer::RequireNoContGradient(const std::vector<bool>& propagate_down) const {
  HS_REQUIRE(!propagate_down[1])
      << "layer '" << param_.name() << "' (" << type()
      << "): no gradient flows to the sequence continuation indicators (cont, bottom[1])";
}

const float* RecurrentLayer::InitialState(const Blobs& bottom, int k) const {
  return expose() ? bottom[StateBottom(k)]->cpu_data() : carried_[k].data();
}

void RecurrentLayer::SaveFinalState(const float* state, const Blobs& top, int k) {
  const int n = N_ * H_;
  copy(n, state, expose() ? top[1 + k]->mutable_cpu_data() : carried_[k].data());
}

// ---------------------------------------------------------------- RNN

// Learned blobs: W_xh, b_h, [W_xh_static], W_hh, W_ho, b_o.
void RNNLayer::MakeBlobs() {
  const pb::RecurrentParameter& p = param_.recurrent_param();
  auto add = [&](std::vector<int64_t> dims, bool bias) {
    blobs_.push_back(std::make_shared<Blob>(CheckedShape(dims, "RNN's learned blob")));
    Fill(bias ? p.bias_filler() : p.weight_filler(), blobs_.back().get());
  };
  add({H_, D_}, false);
  add({H_}, true);
  if (static_) add({H_, S_}, false);
  add({H_, H_}, false);
  add({H_, H_}, false);
  add({H_}, true);
}

void RNNLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  const int s = static_ ? 1 : 0;
  const float* w_xh = blobs_[0]->cpu_data();
  const float* b_h = blobs_[1]->cpu_data();
  const float* w_hh = blobs_[2 + s]->cpu_data();
  const float* w_ho = blobs_[3 + s]->cpu_data();
  const float* b_o = blobs_[4 + s]->cpu_data();
  const float* x = bottom[0]->cpu_data();
  const float* cont = bottom[1]->cpu_data();
  const int tn = T_ * N_, nh = N_ * H_;
  const size_t all = static_cast<size_t>(tn) * H_;
  h_.resize(all);
  o_.resize(all);
  hcont_.resize(all);
  const float* init = InitialState(bottom, 0);
  h0_.assign(init, init + nh);
  if (tn == 0) {
    SaveFinalState(h0_.data(), top, 0);
    return;
  }
  // Pre-activations of every step: W_xh x_t + b_h (+ W_xh_static x_static).
  gemm(Trans::No, Trans::Yes, tn, H_, D_, 1.f, x, w_xh, 0.f, h_.data());
  AddBiasRows(tn, H_, b_h, h_.data());
  if (static_) {
    std::vector<float> xs(nh);
    gemm(Trans::No, Trans::Yes, N_, H_, S_, 1.f, bottom[2]->cpu_data(), blobs_[2]->cpu_data(),
         0.f, xs.data());
    for (int t = 0; t < T_; ++t) axpy(nh, 1.f, xs.data(), h_.data() + static_cast<size_t>(t) * nh);
  }
  for (int t = 0; t < T_; ++t) {
    const float* prev = t ? h_.data() + static_cast<size_t>(t - 1) * nh : h0_.data();
    float* hc = hcont_.data() + static_cast<size_t>(t) * nh;
    float* h = h_.data() + static_cast<size_t>(t) * nh;
    for (int n = 0; n < N_; ++n) {
      const float c = cont[t * N_ + n];
      for (int j = 0; j < H_; ++j) hc[n * H_ + j] = Cont(c, prev[n * H_ + j]);
    }
    gemm(Trans::No, Trans::Yes, N_, H_, H_, 1.f, hc, w_hh, 1.f, h);
    for (int i = 0; i < nh; ++i) h[i] = std::tanh(h[i]);
  }
  // Outputs of every step: tanh(W_ho h_t + b_o).
  gemm(Trans::No, Trans::Yes, tn, H_, H_, 1.f, h_.data(), w_ho, 0.f, o_.data());
  AddBiasRows(tn, H_, b_o, o_.data());
  for (size_t i = 0; i < all; ++i) o_[i] = std::tanh(o_[i]);
  copy(static_cast<int>(all), o_.data(), top[0]->mutable_cpu_data());
  SaveFinalState(h_.data() + static_cast<size_t>(T_ - 1) * nh, top, 0);
}

// Learned blobs accumulate their gradients (the solver clears them); bottoms are overwritten.
void RNNLayer::Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                            const Blobs& bottom) {
  RequireNoContGradient(propagate_down);
  const int s = static_ ? 1 : 0;
  const int tn = T_ * N_, nh = N_ * H_;
  const size_t all = static_cast<size_t>(tn) * H_;
  const float* cont = bottom[1]->cpu_data();
  const float* dtop = top[0]->cpu_diff();
  da_.resize(all);
  dh_.resize(all);
  std::vector<float> dnext(nh, 0.f), dhc(nh);
  if (expose()) copy(nh, top[1]->cpu_diff(), dnext.data());
  if (tn > 0) {
    // Through the output non-linearity; then W_ho, b_o and the gradient reaching each h_t.
    for (size_t i = 0; i < all; ++i) da_[i] = dtop[i] * (1.f - o_[i] * o_[i]);
    if (param_propagate_down(3 + s))
      gemm(Trans::Yes, Trans::No, H_, H_, tn, 1.f, da_.data(), h_.data(), 1.f,
           blobs_[3 + s]->mutable_cpu_diff());
    if (param_propagate_down(4 + s)) SumRows(tn, H_, da_.data(), blobs_[4 + s]->mutable_cpu_diff());
    gemm(Trans::No, Trans::No, tn, H_, H_, 1.f, da_.data(), blobs_[3 + s]->cpu_data(), 0.f,
         dh_.data());
    // Back through time: da_ becomes the gradient of each step's pre-activation.
    const float* w_hh = blobs_[2 + s]->cpu_data();
    for (int t = T_ - 1; t >= 0; --t) {
      const float* h = h_.data() + static_cast<size_t>(t) * nh;
      const float* dh = dh_.data() + static_cast<size_t>(t) * nh;
      float* da = da_.data() + static_cast<size_t>(t) * nh;
      for (int i = 0; i < nh; ++i) da[i] = (dh[i] + dnext[i]) * (1.f - h[i] * h[i]);
      gemm(Trans::No, Trans::No, N_, H_, H_, 1.f, da, w_hh, 0.f, dhc.data());
      for (int n = 0; n < N_; ++n) {
        const float c = cont[t * N_ + n];
        for (int j = 0; j < H_; ++j) dnext[n * H_ + j] = Cont(c, dhc[n * H_ + j]);
      }
    }
    if (param_propagate_down(2 + s))
      gemm(Trans::Yes, Trans::No, H_, H_, tn, 1.f, da_.data(), hcont_.data(), 1.f,
           blobs_[2 + s]->mutable_cpu_diff());
    if (param_propagate_down(0))
      gemm(Trans::Yes, Trans::No, H_, D_, tn, 1.f, da_.data(), bottom[0]->cpu_data(), 1.f,
           blobs_[0]->mutable_cpu_diff());
    if (param_propagate_down(1)) SumRows(tn, H_, da_.data(), blobs_[1]->mutable_cpu_diff());
  }
  if (propagate_down[0] && bottom[0]->count() > 0) {
    float* dx = bottom[0]->mutable_cpu_diff();
    if (tn > 0 && D_ > 0)
      gemm(Trans::No, Trans::No, tn, D_, H_, 1.f, da_.data(), blobs_[0]->cpu_data(), 0.f, dx);
  }
  if (static_ && (param_propagate_down(2) || propagate_down[2])) {
    std::vector<float> dsum(nh, 0.f);
    for (int t = 0; t < T_; ++t) axpy(nh, 1.f, da_.data() + static_cast<size_t>(t) * nh, dsum.data());
    if (param_propagate_down(2) && N_ > 0)
      gemm(Trans::Yes, Trans::No, H_, S_, N_, 1.f, dsum.data(), bottom[2]->cpu_data(), 1.f,
           blobs_[2]->mutable_cpu_diff());
    if (propagate_down[2] && bottom[2]->count() > 0)
      gemm(Trans::No, Trans::No, N_, S_, H_, 1.f, dsum.data(), blobs_[2]->cpu_data(), 0.f,
           bottom[2]->mutable_cpu_diff());
  }
  if (expose() && propagate_down[StateBottom(0)])
    copy(nh, dnext.data(), bottom[StateBottom(0)]->mutable_cpu_diff());
}

// ---------------------------------------------------------------- LSTM

// Learned blobs: W_xc, b_c, [W_xc_static], W_hc; gate rows in the order i, f, o, g.
void LSTMLayer::MakeBlobs() {
  const pb::RecurrentParameter& p = param_.recurrent_param();
  auto add = [&](std::vector<int64_t> dims, bool bias) {
    blobs_.push_back(std::make_shared<Blob>(CheckedShape(dims, "LSTM's learned blob")));
    Fill(bias ? p.bias_filler() : p.weight_filler(), blobs_.back().get());
  };
  const int64_t g = 4 * static_cast<int64_t>(H_);
  add({g, D_}, false);
  add({g}, true);
  if (static_) add({g, S_}, false);
  add({g, H_}, false);
}

void LSTMLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  const int s = static_ ? 1 : 0;
  const int G = 4 * H_;
  const float* w_xc = blobs_[0]->cpu_data();
  const float* b_c = blobs_[1]->cpu_data();
  const float* w_hc = blobs_[2 + s]->cpu_data();
  const float* x = bottom[0]->cpu_data();
  const float* cont = bottom[1]->cpu_data();
  const int tn = T_ * N_, nh = N_ * H_;
  const size_t ng = static_cast<size_t>(N_) * G;
  gates_.resize(static_cast<size_t>(tn) * G);
  c_.resize(static_cast<size_t>(tn) * H_);
  hcont_.resize(static_cast<size_t>(tn) * H_);
  const float* h_init = InitialState(bottom, 0);
  const float* c_init = InitialState(bottom, 1);
  h0_.assign(h_init, h_init + nh);
  c0_.assign(c_init, c_init + nh);
  if (tn == 0) {
    SaveFinalState(h0_.data(), top, 0);
    SaveFinalState(c0_.data(), top, 1);
    return;
  }
  float* h_all = top[0]->mutable_cpu_data();
  // Gate pre-activations of every step: W_xc x_t + b_c (+ W_xc_static x_static).
  gemm(Trans::No, Trans::Yes, tn, G, D_, 1.f, x, w_xc, 0.f, gates_.data());
  AddBiasRows(tn, G, b_c, gates_.data());
  if (static_) {
    std::vector<float> xs(ng);
    gemm(Trans::No, Trans::Yes, N_, G, S_, 1.f, bottom[2]->cpu_data(), blobs_[2]->cpu_data(),
         0.f, xs.data());
    for (int t = 0; t < T_; ++t)
      axpy(static_cast<int>(ng), 1.f, xs.data(), gates_.data() + t * ng);
  }
  for (int t = 0; t < T_; ++t) {
    const float* h_prev = t ? h_all + static_cast<size_t>(t - 1) * nh : h0_.data();
    const float* c_prev = t ? c_.data() + static_cast<size_t>(t - 1) * nh : c0_.data();
    float* hc = hcont_.data() + static_cast<size_t>(t) * nh;
    float* gt = gates_.data() + t * ng;
    float* ct = c_.data() + static_cast<size_t>(t) * nh;
    float* ht = h_all + static_cast<size_t>(t) * nh;
    for (int n = 0; n < N_; ++n) {
      const float k = cont[t * N_ + n];
      for (int j = 0; j < H_; ++j) hc[n * H_ + j] = Cont(k, h_prev[n * H_ + j]);
    }
    gemm(Trans::No, Trans::Yes, N_, G, H_, 1.f, hc, w_hc, 1.f, gt);
    for (int n = 0; n < N_; ++n) {
      const float k = cont[t * N_ + n];
      float* g = gt + static_cast<size_t>(n) * G;
      for (int j = 0; j < H_; ++j) {
        const float i = g[j] = Sigmoid(g[j]);
        const float f = g[H_ + j] = Sigmoid(g[H_ + j]);
        const float o = g[2 * H_ + j] = Sigmoid(g[2 * H_ + j]);
        const float u = g[3 * H_ + j] = std::tanh(g[3 * H_ + j]);
        const float c = Cont(k, f * c_prev[n * H_ + j]) + i * u;
        ct[n * H_ + j] = c;
        ht[n * H_ + j] = o * std::tanh(c);
      }
    }
  }
  SaveFinalState(h_all + static_cast<size_t>(T_ - 1) * nh, top, 0);
  SaveFinalState(c_.data() + static_cast<size_t>(T_ - 1) * nh, top, 1);
}

void LSTMLayer::Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                             const Blobs& bottom) {
  RequireNoContGradient(propagate_down);
  const int s = static_ ? 1 : 0;
  const int G = 4 * H_;
  const int tn = T_ * N_, nh = N_ * H_;
  const size_t ng = static_cast<size_t>(N_) * G;
  const float* cont = bottom[1]->cpu_data();
  const float* w_hc = blobs_[2 + s]->cpu_data();
  dg_.resize(static_cast<size_t>(tn) * G);
  std::vector<float> dh_next(nh, 0.f), dc_next(nh, 0.f), dhc(nh);
  if (expose()) {
    copy(nh, top[1]->cpu_diff(), dh_next.data());
    copy(nh, top[2]->cpu_diff(), dc_next.data());
  }
  if (tn > 0) {
    const float* dtop = top[0]->cpu_diff();
    for (int t = T_ - 1; t >= 0; --t) {
      const float* c_prev = t ? c_.data() + static_cast<size_t>(t - 1) * nh : c0_.data();
      const float* ct = c_.data() + static_cast<size_t>(t) * nh;
      const float* dht = dtop + static_cast<size_t>(t) * nh;
      const float* gt = gates_.data() + t * ng;
      float* dgt = dg_.data() + t * ng;
      for (int n = 0; n < N_; ++n) {
        const float k = cont[t * N_ + n];
        const float* g = gt + static_cast<size_t>(n) * G;
        float* dg = dgt + static_cast<size_t>(n) * G;
        for (int j = 0; j < H_; ++j) {
          const int e = n * H_ + j;
          const float i = g[j], f = g[H_ + j], o = g[2 * H_ + j], u = g[3 * H_ + j];
          const float tc = std::tanh(ct[e]);
          const float dh = dht[e] + dh_next[e];
          const float dc = dc_next[e] + dh * o * (1.f - tc * tc);
          dg[j] = dc * u * i * (1.f - i);
          dg[H_ + j] = Cont(k, dc * c_prev[e]) * f * (1.f - f);
          dg[2 * H_ + j] = dh * tc * o * (1.f - o);
          dg[3 * H_ + j] = dc * i * (1.f - u * u);
          dc_next[e] = Cont(k, dc * f);
        }
      }
      gemm(Trans::No, Trans::No, N_, H_, G, 1.f, dgt, w_hc, 0.f, dhc.data());
      for (int n = 0; n < N_; ++n) {
        const float k = cont[t * N_ + n];
        for (int j = 0; j < H_; ++j) dh_next[n * H_ + j] = Cont(k, dhc[n * H_ + j]);
      }
    }
    if (param_propagate_down(2 + s))
      gemm(Trans::Yes, Trans::No, G, H_, tn, 1.f, dg_.data(), hcont_.data(), 1.f,
           blobs_[2 + s]->mutable_cpu_diff());
    if (param_propagate_down(0))
      gemm(Trans::Yes, Trans::No, G, D_, tn, 1.f, dg_.data(), bottom[0]->cpu_data(), 1.f,
           blobs_[0]->mutable_cpu_diff());
    if (param_propagate_down(1)) SumRows(tn, G, dg_.data(), blobs_[1]->mutable_cpu_diff());
    if (propagate_down[0] && D_ > 0)
      gemm(Trans::No, Trans::No, tn, D_, G, 1.f, dg_.data(), blobs_[0]->cpu_data(), 0.f,
           bottom[0]->mutable_cpu_diff());
    if (static_ && (param_propagate_down(2) || propagate_down[2])) {
      std::vector<float> dsum(ng, 0.f);
      for (int t = 0; t < T_; ++t) axpy(static_cast<int>(ng), 1.f, dg_.data() + t * ng, dsum.data());
      if (param_propagate_down(2))
        gemm(Trans::Yes, Trans::No, G, S_, N_, 1.f, dsum.data(), bottom[2]->cpu_data(), 1.f,
             blobs_[2]->mutable_cpu_diff());
      if (propagate_down[2] && S_ > 0)
        gemm(Trans::No, Trans::No, N_, S_, G, 1.f, dsum.data(), blobs_[2]->cpu_data(), 0.f,
             bottom[2]->mutable_cpu_diff());
    }
  } else if (static_ && propagate_down[2]) {
    set(bottom[2]->count(), 0.f, bottom[2]->mutable_cpu_diff());
  }
  if (expose()) {
    if (propagate_down[StateBottom(0)]) copy(nh, dh_next.data(), bottom[StateBottom(0)]->mutable_cpu_diff());
    if (propagate_down[StateBottom(1)]) copy(nh, dc_next.data(), bottom[StateBottom(1)]->mutable_cpu_diff());
  }
}

HS_REGISTER_LAYER(RNN, RNNLayer);
HS_REGISTER_LAYER(LSTM, LSTMLayer);

}  // namespace hogstream
