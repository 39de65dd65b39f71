// BatchNorm's fused chain (BatchNorm -> Scale -> ReLU, see batch_norm_layer.hpp) on a blob
// held channel-blocked (nChw16c, Layer::Layouts): the blob is num x (channels / 16) blocks of
// `spatial` rows of 16 floats, lane l of block b being channel 16 b + l. The passes are those
// of the NCHW code, row by row with the 16 channels' constants in lanes; every pass walks
// memory in order. Per-channel sums go into float lanes for kSegmentLanes rows at a time,
// then into double totals (as SegmentSums), in a fixed order.
#include <algorithm>
#include <array>
#include <cmath>

#include "core/lane_sums.hpp"
#include "core/layers/batch_norm_layer.hpp"
#include "core/layers/scale_layer.hpp"

namespace hogstream {
namespace {

constexpr int kB = 16;  // channels per block

// Sums of term(k, l) over one block's rows (k = row * 16 + l, the element; l its lane),
// added into out[l * Sums + s].
template <int Sums, typename Term>
void BlockSums(int spatial, Term term, double* out) {
  for (int i = 0; i < spatial;) {
    float acc[Sums][kB] = {};
    const int end = std::min(spatial, i + kSegmentLanes);
    for (; i < end; ++i) {
      for (int l = 0; l < kB; ++l) {
        const std::array<float, Sums> v = term(i * kB + l, l);
        for (int s = 0; s < Sums; ++s) acc[s][l] += v[s];
      }
    }
    for (int l = 0; l < kB; ++l)
      for (int s = 0; s < Sums; ++s) out[l * Sums + s] += acc[s][l];
  }
}

// One block: v = (x - mean) / sd (kept in xn), then the Scale and ReLU as in Normalize. y may
// be x: each row is read whole before it is written.
template <bool Keep, bool Scale, bool Bias, bool Relu>
void NormalizeBlock(const float* x, int spatial, const float* mean, const float* sd,
                    const float* s, const float* b, float* y, float* __restrict xn) {
  for (int i = 0; i < spatial; ++i) {
    float v[kB];
    for (int l = 0; l < kB; ++l) v[l] = (x[i * kB + l] - mean[l]) / sd[l];
    for (int l = 0; l < kB; ++l) {
      if (Keep) xn[i * kB + l] = v[l];
      float z = v[l];
      if (Scale) z = Bias ? v[l] * s[l] + b[l] : v[l] * s[l];
      if (Relu) z = std::max(z, 0.f);
      y[i * kB + l] = z;
    }
  }
}
using NormalizeBlockFn = void (*)(const float*, int, const float*, const float*, const float*,
                                  const float*, float*, float*);
template <bool Keep>
NormalizeBlockFn PickNormalizeBlock(bool bias, bool relu) {
  if (bias) return relu ? NormalizeBlock<Keep, true, true, true> : NormalizeBlock<Keep, true, true, false>;
  return relu ? NormalizeBlock<Keep, true, false, true> : NormalizeBlock<Keep, true, false, false>;
}

// One block of dx, as FusedDx. dx may be dr: each row is read whole before it is written.
template <bool Relu, bool Batch>
void FusedDxBlock(const float* r, const float* dr, const float* __restrict y, int spatial,
                  const float* s, const float* mean_dy, const float* mean_dyy, const float* sd,
                  float* dx) {
  for (int i = 0; i < spatial; ++i) {
    float g[kB];
    for (int l = 0; l < kB; ++l) {
      const int k = i * kB + l;
      const float dz = Relu ? (r[k] > 0.f ? dr[k] : 0.f * dr[k]) : dr[k];
      g[l] = dz * s[l];
    }
    for (int l = 0; l < kB; ++l) {
      const int k = i * kB + l;
      dx[k] = Batch ? (g[l] - mean_dy[l] - mean_dyy[l] * y[k]) / sd[l] : g[l] / sd[l];
    }
  }
}

}  // namespace

void BatchNormLayer::ForwardBlocked(const float* x, float* y, float* xn, const float* sv,
                                    const float* bv, int num, int spatial) {
  const int blocks = channels_ / kB;
  const size_t block = static_cast<size_t>(spatial) * kB;
  auto at = [&](int n, int b) { return (static_cast<size_t>(n) * blocks + b) * block; };
  if (!use_global_stats_) {
    const double m = static_cast<double>(num) * spatial;
    double* sums = sums_.data();
    std::fill(sums, sums + channels_, 0.0);
    for (int n = 0; n < num; ++n) {
      for (int b = 0; b < blocks; ++b) {
        const float* p = x + at(n, b);
        BlockSums<1>(spatial, [p](int k, int) { return std::array<float, 1>{p[k]}; },
                     sums + b * kB);
      }
    }
    for (int c = 0; c < channels_; ++c) mean_[c] = static_cast<float>(sums[c] / m);
    std::fill(sums, sums + channels_, 0.0);
    for (int n = 0; n < num; ++n) {
      for (int b = 0; b < blocks; ++b) {
        const float* p = x + at(n, b);
        const float* mu = mean_.data() + b * kB;
        BlockSums<1>(spatial, [p, mu](int k, int l) {
          const float d = p[k] - mu[l];
          return std::array<float, 1>{d * d};
        }, sums + b * kB);
      }
    }
    for (int c = 0; c < channels_; ++c) {
      var_[c] = static_cast<float>(sums[c] / m);
      std_[c] = std::sqrt(var_[c] + eps_);
    }
  }
  static constexpr float kZeros[kB] = {};  // the bias without one
  const NormalizeBlockFn fn = xn ? PickNormalizeBlock<true>(bv != nullptr, relu_)
                                 : PickNormalizeBlock<false>(bv != nullptr, relu_);
  for (int n = 0; n < num; ++n) {
    for (int b = 0; b < blocks; ++b) {
      const size_t off = at(n, b);
      fn(x + off, spatial, mean_.data() + b * kB, std_.data() + b * kB, sv + b * kB,
         bv ? bv + b * kB : kZeros, y + off, xn ? xn + off : nullptr);
    }
  }
}

void BatchNormLayer::ChannelSumsBlocked(const float* r, const float* dr, const float* y, int num,
                                        int spatial) {
  const int blocks = channels_ / kB;
  const size_t block = static_cast<size_t>(spatial) * kB;
  const float* scale = scale_->blobs()[0]->cpu_data();
  const bool relu = relu_;
  double* sums = sums_.data();  // zeroed by ChannelSums
  for (int n = 0; n < num; ++n) {
    for (int b = 0; b < blocks; ++b) {
      const size_t off = (static_cast<size_t>(n) * blocks + b) * block;
      const float* rr = r + off;
      const float* g = dr + off;
      const float* v = y + off;
      const float* s = scale + b * kB;
      BlockSums<4>(spatial, [rr, g, v, s, relu](int k, int l) {
        const float dz = relu ? (rr[k] > 0.f ? g[k] : 0.f * g[k]) : g[k];
        const float dy = dz * s[l];
        return std::array<float, 4>{dz, dz * v[k], dy, dy * v[k]};
      }, sums + 4 * b * kB);
    }
  }
}

void BatchNormLayer::FusedDxBlocked(const float* r, const float* dr, const float* y, float* dx,
                                    int num, int spatial) {
  const int blocks = channels_ / kB;
  const size_t block = static_cast<size_t>(spatial) * kB;
  const float* scale = scale_->blobs()[0]->cpu_data();
  auto fn = relu_ ? (use_global_stats_ ? FusedDxBlock<true, false> : FusedDxBlock<true, true>)
                  : (use_global_stats_ ? FusedDxBlock<false, false> : FusedDxBlock<false, true>);
  for (int n = 0; n < num; ++n) {
    for (int b = 0; b < blocks; ++b) {
      const size_t off = (static_cast<size_t>(n) * blocks + b) * block;
      fn(r + off, dr + off, y ? y + off : nullptr, spatial, scale + b * kB,
         mean_dy_.data() + b * kB, mean_dyy_.data() + b * kB, std_.data() + b * kB, dx + off);
    }
  }
}

}  // namespace hogstream
