// Pooling where the input or the output is channel-blocked (nChw16c, Layer::Layouts): each
// image's 16-channel blocks are pooled window by window, the 16 channels in lanes, with the
// plane-wise code's rules (Caffe's windows and AVE divisor; MAX keeps the first of equal
// maxima in row-major order and skips NaNs; AVE sums in row-major order and divides), so the
// results are those of the NCHW passes. The argmax is kept per output in the blocked order.
// A side in NCHW is read or written with the lanes a plane apart (a ResNet's last pooling
// feeding an InnerProduct).
#include <algorithm>
#include <cfloat>
#include <cstring>

#include "core/layers/pooling_layer.hpp"
#include "core/math.hpp"

namespace hogstream {
namespace {

constexpr int kB = 16;  // channels per block

// Element (pos, lane) of one image's block of 16 channels: blocked, or 16 planes of `plane`.
template <bool Blocked>
inline size_t At(int pos, int l, int plane) {
  return Blocked ? static_cast<size_t>(pos) * kB + l : static_cast<size_t>(l) * plane + pos;
}
// The 16 lanes as one value (GCC's vector extension: one AVX-512 register where the CPU has
// them, split into narrower ones elsewhere); the compiler does not vectorise the lane loops
// with the argmax on its own (pool1 of cifar10_quick: 3.5 ms per batch that way).
typedef float Lanes __attribute__((vector_size(kB * sizeof(float))));
typedef int IntLanes __attribute__((vector_size(kB * sizeof(int))));
template <bool Blocked>
inline Lanes Load(const float* x, int pos, int plane) {
  Lanes v;
  if (Blocked) {
    std::memcpy(&v, x + static_cast<size_t>(pos) * kB, sizeof v);
  } else {
    for (int l = 0; l < kB; ++l) v[l] = x[At<false>(pos, l, plane)];
  }
  return v;
}
template <bool Blocked>
inline void Store(Lanes v, float* x, int pos, int plane) {
  if (Blocked) {
    std::memcpy(x + static_cast<size_t>(pos) * kB, &v, sizeof v);
  } else {
    for (int l = 0; l < kB; ++l) x[At<false>(pos, l, plane)] = v[l];
  }
}

// Where block (n, b) starts: the same offset in both layouts.
inline size_t BlockStart(int n, int b, int blocks, int plane) {
  return (static_cast<size_t>(n) * blocks + b) * kB * plane;
}

}  // namespace

void PoolingLayer::SetBlocked(const std::vector<bool>& bottom, const std::vector<bool>& top) {
  HS_CHECK(tops_ == 1 && bottom.size() == 1 && top.size() == 1);
  blocked_in_ = bottom[0];
  blocked_out_ = top[0];
}

void PoolingLayer::ColWindow(int pw, int* begin, int* end, int* ave_cols) const {
  const int ws = pw * stride_w_ - pad_w_;
  const int we = std::min(ws + kernel_w_, width_ + pad_w_);
  *ave_cols = we - ws;
  *begin = std::max(ws, 0);
  *end = std::min(we, width_);
}

template <bool InBlocked, bool OutBlocked>
void PoolingLayer::ForwardBlocked(const float* in, float* out, int num, int channels) {
  const int blocks = channels / kB, plane = height_ * width_, out_plane = pooled_h_ * pooled_w_;
  for (int n = 0; n < num; ++n) {
    for (int b = 0; b < blocks; ++b) {
      const float* x = in + BlockStart(n, b, blocks, plane);
      float* y = out + BlockStart(n, b, blocks, out_plane);
      int* mask = max_ ? mask_.data() + BlockStart(n, b, blocks, out_plane) : nullptr;
      for (int ph = 0; ph < pooled_h_; ++ph) {
        int h0, h1, ave_rows;
        RowWindow(ph, &h0, &h1, &ave_rows);
        for (int pw = 0; pw < pooled_w_; ++pw) {
          int w0, w1, ave_cols;
          ColWindow(pw, &w0, &w1, &ave_cols);
          const int o = ph * pooled_w_ + pw;
          Lanes acc;
          // A 3x3 window (the common kernel, unclipped): the same steps unrolled, which lets
          // the core overlap the outputs' chains (cifar10_quick's pool1: 1.5 -> 0.74 ms).
          const bool three = h1 - h0 == 3 && w1 - w0 == 3;
          const int corner = h0 * width_ + w0;
          if (max_ && three) {
            acc = Lanes{} - FLT_MAX;
            IntLanes arg = IntLanes{} - 1;
#pragma GCC unroll 9
            for (int k = 0; k < 9; ++k) {
              const int pos = corner + (k / 3) * width_ + k % 3;
              const Lanes v = Load<InBlocked>(x, pos, plane);
              const IntLanes more = v > acc;
              acc = more ? v : acc;
              arg = more ? IntLanes{} + pos : arg;
            }
            std::memcpy(mask + static_cast<size_t>(o) * kB, &arg, sizeof arg);
          } else if (max_) {
            acc = Lanes{} - FLT_MAX;
            IntLanes arg = IntLanes{} - 1;
            for (int h = h0; h < h1; ++h) {
              for (int w = w0; w < w1; ++w) {
                const int pos = h * width_ + w;
                const Lanes v = Load<InBlocked>(x, pos, plane);
                const IntLanes more = v > acc;  // NaN: false, as in the plane-wise code
                acc = more ? v : acc;
                arg = more ? IntLanes{} + pos : arg;
              }
            }
            std::memcpy(mask + static_cast<size_t>(o) * kB, &arg, sizeof arg);
          } else if (three) {
            acc = Lanes{};
#pragma GCC unroll 9
            for (int k = 0; k < 9; ++k)
              acc += Load<InBlocked>(x, corner + (k / 3) * width_ + k % 3, plane);
            acc /= static_cast<float>(ave_rows * ave_cols);
          } else {
            acc = Lanes{};
            for (int h = h0; h < h1; ++h)
              for (int w = w0; w < w1; ++w) acc += Load<InBlocked>(x, h * width_ + w, plane);
            acc /= static_cast<float>(ave_rows * ave_cols);
          }
          Store<OutBlocked>(acc, y, o, out_plane);
        }
      }
    }
  }
}

template <bool InBlocked, bool OutBlocked>
void PoolingLayer::BackwardBlocked(const float* dy, float* dx, int num, int channels) {
  const int blocks = channels / kB, plane = height_ * width_, out_plane = pooled_h_ * pooled_w_;
  for (int n = 0; n < num; ++n) {
    for (int b = 0; b < blocks; ++b) {
      const float* g = dy + BlockStart(n, b, blocks, out_plane);
      float* d = dx + BlockStart(n, b, blocks, plane);
      set(kB * plane, 0.f, d);  // the block, just before its adds (in cache for them)
      const int* mask = max_ ? mask_.data() + BlockStart(n, b, blocks, out_plane) : nullptr;
      for (int ph = 0; ph < pooled_h_; ++ph) {
        int h0, h1, ave_rows;
        RowWindow(ph, &h0, &h1, &ave_rows);
        // MAX adds in output order; AVE takes a row's outputs right to left, as the plane-wise
        // code does, so that each input's terms add up in the same order.
        for (int k = 0; k < pooled_w_; ++k) {
          const int pw = max_ ? k : pooled_w_ - 1 - k;
          const int o = ph * pooled_w_ + pw;
          const Lanes go = Load<OutBlocked>(g, o, out_plane);
          if (max_) {
            for (int l = 0; l < kB; ++l) {
              const int m = mask[static_cast<size_t>(o) * kB + l];
              if (m >= 0) d[At<InBlocked>(m, l, plane)] += go[l];
            }
            continue;
          }
          int w0, w1, ave_cols;
          ColWindow(pw, &w0, &w1, &ave_cols);
          const Lanes share = go / static_cast<float>(ave_rows * ave_cols);
          for (int h = h0; h < h1; ++h) {
            for (int w = w0; w < w1; ++w) {
              const int pos = h * width_ + w;
              Store<InBlocked>(Load<InBlocked>(d, pos, plane) + share, d, pos, plane);
            }
          }
        }
      }
    }
  }
}

template void PoolingLayer::ForwardBlocked<true, true>(const float*, float*, int, int);
template void PoolingLayer::ForwardBlocked<true, false>(const float*, float*, int, int);
template void PoolingLayer::ForwardBlocked<false, true>(const float*, float*, int, int);
template void PoolingLayer::BackwardBlocked<true, true>(const float*, float*, int, int);
template void PoolingLayer::BackwardBlocked<true, false>(const float*, float*, int, int);
template void PoolingLayer::BackwardBlocked<false, true>(const float*, float*, int, int);

}  // namespace hogstream
