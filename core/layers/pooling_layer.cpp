#include "core/layers/pooling_layer.hpp"

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstring>

#include "core/math.hpp"

namespace hogstream {

namespace {
// A uint32 setting as an int: above INT_MAX it would wrap negative (4294967295 is -1) and be
// accepted as a negative pad.
int AsInt(uint32_t v, const char* what) {
  HS_REQUIRE(v <= static_cast<uint32_t>(INT_MAX))
      << what << " " << v << " is out of range (a negative value written as unsigned?)";
  return static_cast<int>(v);
}

// Outputs computed together by the vector loops (one AVX-512 register of floats).
constexpr int kLanes = 16;
}  // namespace

void PoolingLayer::LayerSetUp(const Blobs& bottom, const Blobs& top) {
  const pb::PoolingParameter& p = param_.pooling_param();
  tops_ = static_cast<int>(top.size());
  HS_REQUIRE(p.pool() != pb::PoolingParameter::STOCHASTIC)
      << "STOCHASTIC pooling is not supported (use MAX or AVE)";
  max_ = p.pool() == pb::PoolingParameter::MAX;
  global_ = p.global_pooling();
  if (global_) {
    HS_REQUIRE(!p.has_kernel_size() && !p.has_kernel_h() && !p.has_kernel_w())
        << "global_pooling takes its kernel from the input; kernel_size/kernel_h/kernel_w "
           "cannot be given";
  } else {
    HS_REQUIRE(p.has_kernel_size() != (p.has_kernel_h() || p.has_kernel_w()))
        << "give the kernel as kernel_size or as kernel_h and kernel_w, not both";
    HS_REQUIRE(p.has_kernel_size() || (p.has_kernel_h() && p.has_kernel_w()))
        << "a non-square kernel needs both kernel_h and kernel_w";
    kernel_h_ = AsInt(p.has_kernel_size() ? p.kernel_size() : p.kernel_h(), "kernel size");
    kernel_w_ = AsInt(p.has_kernel_size() ? p.kernel_size() : p.kernel_w(), "kernel size");
    HS_REQUIRE(kernel_h_ > 0 && kernel_w_ > 0) << "kernel size must be positive";
  }
  HS_REQUIRE(!p.has_pad() || (!p.has_pad_h() && !p.has_pad_w()))
      << "give the padding as pad or as pad_h and pad_w, not both";
  HS_REQUIRE(p.has_pad_h() == p.has_pad_w()) << "pad_h and pad_w must be given together";
  HS_REQUIRE(!p.has_stride() || (!p.has_stride_h() && !p.has_stride_w()))
      << "give the stride as stride or as stride_h and stride_w, not both";
  HS_REQUIRE(p.has_stride_h() == p.has_stride_w())
      << "stride_h and stride_w must be given together";
  pad_h_ = AsInt(p.has_pad_h() ? p.pad_h() : p.pad(), "pad");
  pad_w_ = AsInt(p.has_pad_h() ? p.pad_w() : p.pad(), "pad");
  stride_h_ = AsInt(p.has_stride_h() ? p.stride_h() : p.stride(), "stride");
  stride_w_ = AsInt(p.has_stride_h() ? p.stride_w() : p.stride(), "stride");
  HS_REQUIRE(stride_h_ > 0 && stride_w_ > 0) << "stride must be positive";
  if (global_) {
    HS_REQUIRE(pad_h_ == 0 && pad_w_ == 0 && stride_h_ == 1 && stride_w_ == 1)
        << "global_pooling needs pad = 0 and stride = 1";
  } else {
    HS_REQUIRE(pad_h_ < kernel_h_ && pad_w_ < kernel_w_)
        << "pad (" << pad_h_ << ", " << pad_w_ << ") must be smaller than the kernel ("
        << kernel_h_ << ", " << kernel_w_ << ")";
  }
}

void PoolingLayer::Reshape(const Blobs& bottom, const Blobs& top) {
  HS_REQUIRE(bottom[0]->num_axes() == 4)
      << "input must be 4-d (num, channels, height, width), got " << bottom[0]->shape_string();
  height_ = bottom[0]->height();
  width_ = bottom[0]->width();
  if (global_) {
    kernel_h_ = height_;
    kernel_w_ = width_;
  }
  HS_REQUIRE(height_ + 2 * pad_h_ >= kernel_h_ && width_ + 2 * pad_w_ >= kernel_w_)
      << "kernel " << kernel_h_ << "x" << kernel_w_ << " is larger than the padded input "
      << bottom[0]->shape_string();
  const bool ceil = param_.pooling_param().round_mode() == pb::PoolingParameter::CEIL;
  auto pooled = [ceil](int extent, int kernel, int stride) {
    const int span = extent - kernel;  // >= 0
    return (ceil ? (span + stride - 1) / stride : span / stride) + 1;
  };
  pooled_h_ = pooled(height_ + 2 * pad_h_, kernel_h_, stride_h_);
  pooled_w_ = pooled(width_ + 2 * pad_w_, kernel_w_, stride_w_);
  // With padding, CEIL may add a window that starts in the padding; Caffe drops it.
  if (pad_h_ > 0 && (pooled_h_ - 1) * stride_h_ >= height_ + pad_h_) --pooled_h_;
  if (pad_w_ > 0 && (pooled_w_ - 1) * stride_w_ >= width_ + pad_w_) --pooled_w_;

  const std::vector<int> shape{bottom[0]->num(), bottom[0]->channels(), pooled_h_, pooled_w_};
  top[0]->Reshape(shape);
  if (top.size() > 1) top[1]->Reshape(shape);
  if (max_) mask_.resize(top[0]->count());

  if (!max_) {
    ave_cols_.resize(pooled_w_);
    for (int pw = 0; pw < pooled_w_; ++pw) {
      const int ws = pw * stride_w_ - pad_w_;
      ave_cols_[pw] = std::min(ws + kernel_w_, width_ + pad_w_) - ws;
    }
  }

  whole_plane_ = pad_h_ == 0 && pad_w_ == 0 && kernel_h_ == height_ && kernel_w_ == width_;
  if (whole_plane_) return;
  // Phases: output (ph, pw) reads padded input (ph * sh + y, pw * sw + x) for kernel element
  // (y, x). Phase (a, b) holds the padded input's rows a, a + sh, ... and columns b, b + sw,
  // ..., as phase_rows_ x phase_cols_, so that element (y, x) of window (ph, pw) is phase
  // (y % sh, x % sw) at (ph + y / sh, pw + x / sw): with the flat index
  // j = ph * phase_cols_ + pw, at j + (y / sh) * phase_cols_ + x / sw. One offset per kernel
  // element, the same for every output: the flat loop has no edge cases.
  phases_h_ = std::min(stride_h_, kernel_h_);
  phases_w_ = std::min(stride_w_, kernel_w_);
  phase_rows_ = pooled_h_ + (kernel_h_ - 1) / stride_h_;
  // The last window's columns end at (pooled_w - 1) * sw + kw - 1 < sw * phase_cols_.
  phase_cols_ = pooled_w_ - 1 + (kernel_w_ + stride_w_ - 1) / stride_w_;
  flat_n_ = (pooled_h_ * phase_cols_ + kLanes - 1) / kLanes * kLanes;
  // A phase: its rows, then slack for the whole blocks of the last output row (they read
  // less than a row plus a block past it).
  phase_size_ = phase_rows_ * phase_cols_ + phase_cols_ + kLanes;
  // First the rows of each row phase a, with the padded columns at pitch sw * phase_cols_;
  // for sw > 1 these are then split by column into the phases (a, b), after them.
  row_pitch_ = stride_w_ * phase_cols_;
  row_phase_size_ = phase_rows_ * row_pitch_ + (stride_w_ == 1 ? phase_cols_ + kLanes : 0);
  phase_base_ = stride_w_ == 1 ? 0 : phases_h_ * row_phase_size_;
  copy_cols_ = std::min(width_, row_pitch_ - pad_w_);  // FLOOR may leave columns unread
  row_dst_.resize(height_);
  for (int h = 0; h < height_; ++h) {
    const int a = (h + pad_h_) % stride_h_, r = (h + pad_h_) / stride_h_;
    row_dst_[h] = a < phases_h_ && r < phase_rows_
                      ? a * row_phase_size_ + r * row_pitch_ + pad_w_
                      : -1;
  }
  // Filled once per Reshape; PoolPlane rewrites only the copied part.
  const size_t total = stride_w_ == 1 ? static_cast<size_t>(phases_h_) * row_phase_size_
                                      : phase_base_ + static_cast<size_t>(phases_h_) *
                                                          phases_w_ * phase_size_;
  phases_.assign(total, max_ ? -FLT_MAX : 0.f);
  if (!max_) grad_phases_.resize(total);
  // Backward (AVE) writes the plane from the row phases; rows or columns no window reads
  // (FLOOR) get zeros first.
  covered_ = copy_cols_ == width_ &&
             std::none_of(row_dst_.begin(), row_dst_.end(), [](int d) { return d < 0; });
  tap_src_.resize(kernel_h_ * kernel_w_);
  tap_idx_.resize(kernel_h_ * kernel_w_);
  for (int y = 0, k = 0; y < kernel_h_; ++y) {
    for (int x = 0; x < kernel_w_; ++x, ++k) {
      const int a = y % stride_h_, b = x % stride_w_;
      const int phase = stride_w_ == 1 ? a * row_phase_size_
                                       : phase_base_ + (a * phases_w_ + b) * phase_size_;
      tap_src_[k] = phase + (y / stride_h_) * phase_cols_ + x / stride_w_;
      tap_idx_[k] = y * width_ + x;
    }
  }
  flat_out_.resize(flat_n_);
  if (max_) {
    flat_arg_.resize(flat_n_);
    flat_base_.resize(flat_n_);
    for (int j = 0; j < flat_n_; ++j) {
      const int ph = j / phase_cols_, pw = j % phase_cols_;
      flat_base_[j] = (ph * stride_h_ - pad_h_) * width_ + pw * stride_w_ - pad_w_;
    }
  }
}

void PoolingLayer::RowWindow(int ph, int* begin, int* end, int* ave_rows) const {
  const int hs = ph * stride_h_ - pad_h_;
  const int he = std::min(hs + kernel_h_, height_ + pad_h_);
  *ave_rows = he - hs;
  *begin = std::max(hs, 0);
  *end = std::min(he, height_);
}

// The forward pass, plane by plane:
//  1. SplitPhases copies the plane's rows into the padded row phases (for stride 1, one padded
//     copy of the plane) and, for a column stride above 1, splits those by column (a long
//     loop), so that every kernel element is read at a fixed offset from the flat output
//     index (see Reshape).
//  2. MaxFlat / SumFlat run over the flat outputs kLanes at a time, kernel element by kernel
//     element in row-major order: each step is one load, one compare and two selects (or one
//     add) over a whole block, with no edge cases: the padding holds -FLT_MAX (never > the
//     running max, which starts at -FLT_MAX) or 0 (adding +0 to a sum that started at +0
//     changes nothing). So the first of equal maxima wins, NaNs are skipped, a window with
//     nothing above -FLT_MAX keeps mask -1, and sums add up in Caffe's row-major order: the
//     results are bit for bit those of a direct per-window loop.
//  3. The rows are compacted into the output (dropping the extra flat columns), AVE dividing
//     by Caffe's divisor.
namespace {
// K: kernel elements when known at compile time (the kernel loop is then unrolled and the
// running max stays in registers); 0 for the general loop, which keeps it in the flat arrays.
template <int K>
void MaxFlat(int taps, const int* __restrict tap_src, const int* __restrict tap_idx,
             const float* __restrict phases, const int* __restrict base, int n,
             float* __restrict out, int* __restrict arg) {
  if (K) {
    int src[K ? K : 1], idx[K ? K : 1];
    for (int k = 0; k < K; ++k) src[k] = tap_src[k], idx[k] = tap_idx[k];
    // n is a whole number of blocks: the vector loop has no scalar remainder.
    // The winner's offset within the window, made an index in the plane at the end.
    for (int j0 = 0; j0 < n; j0 += kLanes) {
      for (int j = j0; j < j0 + kLanes; ++j) {
        float best = -FLT_MAX;
        int at = -1;
        for (int k = 0; k < K; ++k) {
          const float v = phases[src[k] + j];
          const bool win = v > best;
          best = win ? v : best;
          at = win ? idx[k] : at;
        }
        out[j] = best;
        arg[j] = at < 0 ? -1 : base[j] + at;
      }
    }
    return;
  }
  for (int j = 0; j < n; ++j) out[j] = -FLT_MAX, arg[j] = -1;
  for (int k = 0; k < taps; ++k) {
    const float* __restrict p = phases + tap_src[k];
    const int idx = tap_idx[k];
    for (int j = 0; j < n; ++j) {
      const float v = p[j];
      const bool win = v > out[j];
      out[j] = win ? v : out[j];
      arg[j] = win ? base[j] + idx : arg[j];
    }
  }
}

template <int K>
void SumFlat(int taps, const int* __restrict tap_src, const float* __restrict phases, int n,
             float* __restrict out) {
  if (K) {
    int src[K ? K : 1];
    for (int k = 0; k < K; ++k) src[k] = tap_src[k];
    for (int j0 = 0; j0 < n; j0 += kLanes) {
      for (int j = j0; j < j0 + kLanes; ++j) {
        float sum = 0.f;
        for (int k = 0; k < K; ++k) sum += phases[src[k] + j];
        out[j] = sum;
      }
    }
    return;
  }
  for (int j = 0; j < n; ++j) out[j] = 0.f;
  for (int k = 0; k < taps; ++k) {
    const float* __restrict p = phases + tap_src[k];
    for (int j = 0; j < n; ++j) out[j] += p[j];
  }
}

// dst[0, n) = src[0, n): for the short rows of small planes a few fixed-size moves (a plain
// loop becomes a call to memmove, which costs more than such a copy).
template <typename T>
inline void CopyRow(const T* __restrict src, int n, T* __restrict dst) {
  static_assert(sizeof(T) == 4);
  if (n >= 32) {
    std::memcpy(dst, src, n * sizeof(T));
    return;
  }
  if (n & 16) std::memcpy(dst, src, 64), src += 16, dst += 16;
  if (n & 8) std::memcpy(dst, src, 32), src += 8, dst += 8;
  if (n & 4) std::memcpy(dst, src, 16), src += 4, dst += 4;
  if (n & 2) std::memcpy(dst, src, 8), src += 2, dst += 2;
  if (n & 1) std::memcpy(dst, src, 4);
}

// out + b * out_stride gets in[S * i + b] for i < n, b < phases: a row phase's columns split
// by their remainder modulo the column stride S (S = 0: s at run time).
template <int S>
void SplitColumns(const float* __restrict in, int s, int phases, int n, int out_stride,
                  float* __restrict out) {
  if (S == 2 && phases == 2) {
    float* __restrict even = out;
    float* __restrict odd = out + out_stride;
    for (int i = 0; i < n; ++i) even[i] = in[2 * i], odd[i] = in[2 * i + 1];
    return;
  }
  const int st = S ? S : s;
  for (int b = 0; b < phases; ++b) {
    float* __restrict o = out + b * out_stride;
    for (int i = 0; i < n; ++i) o[i] = in[st * i + b];
  }
}

// The inverse of SplitColumns: in[S * i + b] = out + b * out_stride [i], for i < n, b < phases.
template <int S>
void MergeColumns(const float* __restrict split, int s, int phases, int n, int split_stride,
                  float* __restrict rows) {
  if (S == 2 && phases == 2) {
    const float* __restrict even = split;
    const float* __restrict odd = split + split_stride;
    for (int i = 0; i < n; ++i) rows[2 * i] = even[i], rows[2 * i + 1] = odd[i];
    return;
  }
  const int st = S ? S : s;
  for (int b = 0; b < phases; ++b) {
    const float* __restrict o = split + b * split_stride;
    for (int i = 0; i < n; ++i) rows[st * i + b] = o[i];
  }
}

// GlobalForward's block of L planes (L = 0: `lanes` planes, fewer than kLanes).
template <int L>
void GlobalBlock(bool max, int lanes, const float* __restrict x, int size, float divisor,
                 float* __restrict out, int* __restrict mask) {
  const int n = L ? L : lanes;
  if (max) {
    float best[kLanes];
    int at[kLanes];
    for (int l = 0; l < kLanes; ++l) best[l] = -FLT_MAX, at[l] = -1;
    for (int i = 0; i < size; ++i) {
      for (int l = 0; l < n; ++l) {
        const float v = x[l * size + i];
        const bool win = v > best[l];
        best[l] = win ? v : best[l];
        at[l] = win ? i : at[l];
      }
    }
    for (int l = 0; l < n; ++l) out[l] = best[l], mask[l] = at[l];
  } else {
    float sum[kLanes];
    for (int l = 0; l < kLanes; ++l) sum[l] = 0.f;
    for (int i = 0; i < size; ++i) {
      for (int l = 0; l < n; ++l) sum[l] += x[l * size + i];
    }
    for (int l = 0; l < n; ++l) out[l] = sum[l] / divisor;
  }
}
}  // namespace

void PoolingLayer::SplitPhases(const float* in) {
  float* phases = phases_.data();
  for (int h = 0; h < height_; ++h) {
    if (row_dst_[h] >= 0) CopyRow(in + h * width_, copy_cols_, phases + row_dst_[h]);
  }
  if (stride_w_ == 1) return;
  const int n = phase_rows_ * phase_cols_;
  for (int a = 0; a < phases_h_; ++a) {
    const float* rows = phases + a * row_phase_size_;
    float* out = phases + phase_base_ + a * phases_w_ * phase_size_;
    if (stride_w_ == 2) {
      SplitColumns<2>(rows, 2, phases_w_, n, phase_size_, out);
    } else {
      SplitColumns<0>(rows, stride_w_, phases_w_, n, phase_size_, out);
    }
  }
}

void PoolingLayer::PoolPlane(const float* in, float* out, int* mask) {
  SplitPhases(in);
  const int taps = kernel_h_ * kernel_w_;
  const int* src = tap_src_.data();
  const float* phases = phases_.data();
  float* flat = flat_out_.data();
  if (max_) {
    int* arg = flat_arg_.data();
    const int* idx = tap_idx_.data();
    const int* base = flat_base_.data();
    if (taps == 9) {
      MaxFlat<9>(taps, src, idx, phases, base, flat_n_, flat, arg);
    } else if (taps == 4) {
      MaxFlat<4>(taps, src, idx, phases, base, flat_n_, flat, arg);
    } else {
      MaxFlat<0>(taps, src, idx, phases, base, flat_n_, flat, arg);
    }
    for (int ph = 0; ph < pooled_h_; ++ph) {
      CopyRow(flat + ph * phase_cols_, pooled_w_, out + ph * pooled_w_);
      CopyRow(arg + ph * phase_cols_, pooled_w_, mask + ph * pooled_w_);
    }
    return;
  }
  if (taps == 9) {
    SumFlat<9>(taps, src, phases, flat_n_, flat);
  } else if (taps == 4) {
    SumFlat<4>(taps, src, phases, flat_n_, flat);
  } else {
    SumFlat<0>(taps, src, phases, flat_n_, flat);
  }
  for (int ph = 0; ph < pooled_h_; ++ph) {
    int h0, h1, ave_rows;
    RowWindow(ph, &h0, &h1, &ave_rows);
    const float* f = flat + ph * phase_cols_;
    float* o = out + ph * pooled_w_;
    for (int pw = 0; pw < pooled_w_; ++pw)
      o[pw] = f[pw] / static_cast<float>(ave_rows * ave_cols_[pw]);
  }
}

// AVE backward of one plane, the forward's phases run in reverse: each output's dy / divisor
// (0 for the flat loop's extra columns) is added to its window in the phase planes, kernel
// element by kernel element, rows last to first and columns first to last, so that every input
// gets its terms in the order of the direct loop (windows by output row, then by kernel
// column); the adds of 0 change nothing (a sum from +0 is never -0). The phases are then merged
// back into the plane's rows. Each tap is one vector loop over the flat outputs.
void PoolingLayer::AveBackPlane(const float* dy, float* dx) {
  float* g = flat_out_.data();
  for (int ph = 0; ph < pooled_h_; ++ph) {
    int h0, h1, ave_rows;
    RowWindow(ph, &h0, &h1, &ave_rows);
    float* row = g + ph * phase_cols_;
    for (int pw = 0; pw < pooled_w_; ++pw)
      row[pw] = dy[ph * pooled_w_ + pw] / static_cast<float>(ave_rows * ave_cols_[pw]);
    for (int pw = pooled_w_; pw < phase_cols_; ++pw) row[pw] = 0.f;
  }
  for (int j = pooled_h_ * phase_cols_; j < flat_n_; ++j) g[j] = 0.f;
  float* phases = grad_phases_.data();
  std::fill(grad_phases_.begin(), grad_phases_.end(), 0.f);
  for (int y = kernel_h_ - 1; y >= 0; --y) {
    for (int x = 0; x < kernel_w_; ++x) {
      float* __restrict p = phases + tap_src_[y * kernel_w_ + x];
      const float* __restrict gg = g;
      for (int j = 0; j < flat_n_; ++j) p[j] += gg[j];
    }
  }
  if (stride_w_ > 1) {
    const int n = phase_rows_ * phase_cols_;
    for (int a = 0; a < phases_h_; ++a) {
      float* rows = phases + a * row_phase_size_;
      const float* split = phases + phase_base_ + a * phases_w_ * phase_size_;
      if (stride_w_ == 2) {
        MergeColumns<2>(split, 2, phases_w_, n, phase_size_, rows);
      } else {
        MergeColumns<0>(split, stride_w_, phases_w_, n, phase_size_, rows);
      }
    }
  }
  if (!covered_) set(height_ * width_, 0.f, dx);
  for (int h = 0; h < height_; ++h) {
    if (row_dst_[h] >= 0) CopyRow(phases + row_dst_[h], copy_cols_, dx + h * width_);
  }
}

// The window is the whole plane: each plane is one output, read in row-major order; kLanes
// planes at a time, so that their running max or sum are independent chains.
void PoolingLayer::GlobalForward(int planes, const float* in, float* out, int* mask) const {
  const int size = height_ * width_;
  const float divisor = static_cast<float>(size);
  for (int p = 0; p < planes; p += kLanes) {
    const float* x = in + static_cast<size_t>(p) * size;
    int* m = max_ ? mask + p : nullptr;
    if (planes - p >= kLanes) {
      GlobalBlock<kLanes>(max_, kLanes, x, size, divisor, out + p, m);
    } else {
      GlobalBlock<0>(max_, planes - p, x, size, divisor, out + p, m);
    }
  }
}

// MAX, 2x2 windows, stride 2, no padding, every window inside the image: the most common
// pooling (LeNet), read straight from the input (no phase copies). Each window is read in
// Caffe's row-major order from -FLT_MAX with a strict `>` and selects (no branches), so the
// result and the mask are those of the general path, NaNs and all-(-FLT_MAX) windows
// included; the fixed shape lets the compiler vectorise across output columns.
static void Max2x2(const float* __restrict in, int width, int pooled_h, int pooled_w,
                   float* __restrict out, int* __restrict mask) {
  for (int ph = 0; ph < pooled_h; ++ph) {
    const float* r0 = in + 2 * ph * width;
    const float* r1 = r0 + width;
    const int base = 2 * ph * width;
    for (int pw = 0; pw < pooled_w; ++pw) {
      const float a = r0[2 * pw], b = r0[2 * pw + 1], c = r1[2 * pw], d = r1[2 * pw + 1];
      // std::max(m, v) is `v > m ? v : m`; the index follows with mask arithmetic.
      float best = std::max(-FLT_MAX, a);
      int at = static_cast<int>(a > -FLT_MAX) - 1;  // a's offset 0, or -1
      int sel = -static_cast<int>(b > best);
      at = (at & ~sel) | (1 & sel), best = std::max(best, b);
      sel = -static_cast<int>(c > best);
      at = (at & ~sel) | (width & sel), best = std::max(best, c);
      sel = -static_cast<int>(d > best);
      at = (at & ~sel) | ((width + 1) & sel), best = std::max(best, d);
      out[ph * pooled_w + pw] = best;
      mask[ph * pooled_w + pw] = at < 0 ? -1 : base + 2 * pw + at;
    }
  }
}

void PoolingLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  const int planes = bottom[0]->num() * bottom[0]->channels();
  const int in_plane = height_ * width_, out_plane = pooled_h_ * pooled_w_;
  const float* in = bottom[0]->cpu_data();
  float* out = top[0]->mutable_cpu_data();
  if (blocked_in_ || blocked_out_) {
    const int num = bottom[0]->num(), channels = bottom[0]->channels();
    if (!blocked_in_) return ForwardBlocked<false, true>(in, out, num, channels);
    if (!blocked_out_) return ForwardBlocked<true, false>(in, out, num, channels);
    return ForwardBlocked<true, true>(in, out, num, channels);
  }
  int* mask = max_ ? mask_.data() : nullptr;
  const bool fast2x2 = max_ && kernel_h_ == 2 && kernel_w_ == 2 && stride_h_ == 2 &&
                       stride_w_ == 2 && pad_h_ == 0 && pad_w_ == 0 &&
                       2 * pooled_h_ <= height_ && 2 * pooled_w_ <= width_;
  if (whole_plane_) {
    GlobalForward(planes, in, out, mask);
  } else {
    for (int p = 0; p < planes; ++p, in += in_plane, out += out_plane) {
      if (fast2x2) {
        Max2x2(in, width_, pooled_h_, pooled_w_, out, mask + p * out_plane);
      } else {
        PoolPlane(in, out, max_ ? mask + p * out_plane : nullptr);
      }
    }
  }
  if (max_ && top.size() > 1) {
    float* t = top[1]->mutable_cpu_data();
    for (int i = 0; i < top[1]->count(); ++i) t[i] = static_cast<float>(mask_[i]);
  }
}

void PoolingLayer::Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                                const Blobs& bottom) {
  if (!propagate_down[0]) return;
  const int planes = bottom[0]->num() * bottom[0]->channels();
  const int in_plane = height_ * width_, out_plane = pooled_h_ * pooled_w_;
  const float* dy = top[0]->cpu_diff();
  float* dx = bottom[0]->mutable_cpu_diff();
  if (blocked_in_ || blocked_out_) {
    const int num = bottom[0]->num(), channels = bottom[0]->channels();
    if (!blocked_in_) return BackwardBlocked<false, true>(dy, dx, num, channels);
    if (!blocked_out_) return BackwardBlocked<true, false>(dy, dx, num, channels);
    return BackwardBlocked<true, true>(dy, dx, num, channels);
  }
  if (!max_ && whole_plane_) {
    // Every input gets its plane's dy / divisor (added to 0, as the general loop does).
    const float divisor = static_cast<float>(in_plane);
    for (int p = 0; p < planes; ++p, dx += in_plane) {
      const float g = dy[p] / divisor;
      for (int i = 0; i < in_plane; ++i) dx[i] = 0.f + g;
    }
    return;
  }
  // Plane by plane, each plane zeroed just before its gradients are added: the adds then
  // find it in cache (zeroing the whole blob first sends it to memory and back).
  for (int p = 0; p < planes; ++p, dx += in_plane, dy += out_plane) {
    if (!max_) {
      AveBackPlane(dy, dx);
      continue;
    }
    set(in_plane, 0.f, dx);
    const int* m = mask_.data() + p * out_plane;
    for (int i = 0; i < out_plane; ++i)
      if (m[i] >= 0) dx[m[i]] += dy[i];
  }
}

HS_REGISTER_LAYER(Pooling, PoolingLayer);

}  // namespace hogstream
