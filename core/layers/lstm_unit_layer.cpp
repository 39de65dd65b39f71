// LSTMUnit layer, CPU passes: element by element over the N x D cells.
#include "core/layers/lstm_unit_layer.hpp"

#include <cmath>

#include "core/math.hpp"

namespace hogstream {


void LSTMUnitLayer::Reshape(const Blobs& bottom, const Blobs& top) {
  const Blob& c = *bottom[0];
  const Blob& gates = *bottom[1];
  const Blob& cont = *bottom[2];
  HS_REQUIRE(c.num_axes() == 3 && c.shape(0) == 1)
      << "c_prev (bottom[0]) must be 1 x N x D; got shape " << c.shape_string();
  N_ = c.shape(1);
  D_ = c.shape(2);
  HS_REQUIRE(gates.num_axes() == 3 && gates.shape(0) == 1 && gates.shape(1) == N_ &&
             static_cast<int64_t>(gates.shape(2)) == 4 * static_cast<int64_t>(D_))
      << "the gates (bottom[1]) must be 1 x N x 4D = 1 x " << N_ << " x "
      << 4 * static_cast<int64_t>(D_) << " for c_prev of shape " << c.shape_string()
      << "; got shape " << gates.shape_string();
  HS_REQUIRE(cont.num_axes() == 2 && cont.shape(0) == 1 && cont.shape(1) == N_)
      << "cont (bottom[2]) must be 1 x N = 1 x " << N_ << "; got shape " << cont.shape_string();
  top[0]->ReshapeLike(c);
  top[1]->ReshapeLike(c);
}

void LSTMUnitLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  const float* c_prev = bottom[0]->cpu_data();
  const float* x = bottom[1]->cpu_data();
  const float* cont = bottom[2]->cpu_data();
  float* c = top[0]->mutable_cpu_data();
  float* h = top[1]->mutable_cpu_data();
  acts_.resize(static_cast<size_t>(N_) * 4 * D_);
  for (int n = 0; n < N_; ++n) {
    const float* g = x + static_cast<size_t>(n) * 4 * D_;
    float* a = acts_.data() + static_cast<size_t>(n) * 4 * D_;
    const float k = cont[n];
    for (int d = 0; d < D_; ++d) {
      const size_t e = static_cast<size_t>(n) * D_ + d;
      const float i = a[d] = Sigmoid(g[d]);
      const float f = a[D_ + d] = Sigmoid(g[D_ + d]);
      const float o = a[2 * D_ + d] = Sigmoid(g[2 * D_ + d]);
      const float u = a[3 * D_ + d] = std::tanh(g[3 * D_ + d]);
      c[e] = (k == 0.f ? 0.f : k * f * c_prev[e]) + i * u;
      h[e] = o * std::tanh(c[e]);
    }
  }
}

void LSTMUnitLayer::Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                                 const Blobs& bottom) {
  HS_REQUIRE(!propagate_down[2])
      << "layer '" << param_.name()
      << "' (LSTMUnit): no gradient flows to the sequence continuation indicators (cont, "
         "bottom[2])";
  if (!propagate_down[0] && !propagate_down[1]) return;
  const float* c_prev = bottom[0]->cpu_data();
  const float* cont = bottom[2]->cpu_data();
  const float* c = top[0]->cpu_data();
  const float* dc_top = top[0]->cpu_diff();
  const float* dh_top = top[1]->cpu_diff();
  float* dc_prev = propagate_down[0] ? bottom[0]->mutable_cpu_diff() : nullptr;
  float* dx = propagate_down[1] ? bottom[1]->mutable_cpu_diff() : nullptr;
  for (int n = 0; n < N_; ++n) {
    const float* a = acts_.data() + static_cast<size_t>(n) * 4 * D_;
    float* dg = dx ? dx + static_cast<size_t>(n) * 4 * D_ : nullptr;
    const float k = cont[n];
    for (int d = 0; d < D_; ++d) {
      const size_t e = static_cast<size_t>(n) * D_ + d;
      const float i = a[d], f = a[D_ + d], o = a[2 * D_ + d], u = a[3 * D_ + d];
      const float tc = std::tanh(c[e]);
      const float dc = dc_top[e] + dh_top[e] * o * (1.f - tc * tc);
      if (dc_prev) dc_prev[e] = k == 0.f ? 0.f : k * dc * f;
      if (dg) {
        dg[d] = dc * u * i * (1.f - i);
        dg[D_ + d] = (k == 0.f ? 0.f : k * dc * c_prev[e]) * f * (1.f - f);
        dg[2 * D_ + d] = dh_top[e] * tc * o * (1.f - o);
        dg[3 * D_ + d] = dc * i * (1.f - u * u);
      }
    }
  }
}

HS_REGISTER_LAYER(LSTMUnit, LSTMUnitLayer);

}  // namespace hogstream
