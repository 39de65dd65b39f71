#include "core/lane_sums.hpp"
#include "core/math.hpp"

#include <dnnl.h>

#include <cmath>
#include <cstring>
#include <random>

#include "base/common.hpp"
#include "core/context.hpp"

namespace hogstream {

void gemm(Trans ta, Trans tb, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    for (int i = 0; i < M; ++i) {
      if (beta == 0.f) set(N, 0.f, C + static_cast<size_t>(i) * ldc);
      else scal(N, beta, C + static_cast<size_t>(i) * ldc);
    }
    return;
  }
  dnnl_status_t st = dnnl_sgemm(ta == Trans::No ? 'N' : 'T', tb == Trans::No ? 'N' : 'T', M, N, K,
                                alpha, A, lda, B, ldb, beta, C, ldc);
  HS_CHECK(st == dnnl_success) << "dnnl_sgemm failed with status " << static_cast<int>(st);
}

void gemm(Trans ta, Trans tb, int M, int N, int K, float alpha, const float* A, const float* B,
          float beta, float* C) {
  gemm(ta, tb, M, N, K, alpha, A, ta == Trans::No ? K : M, B, tb == Trans::No ? N : K, beta, C, N);
}

void gemv(Trans ta, int M, int N, float alpha, const float* A, const float* x, float beta,
          float* y) {
  // op(A) * x as a GEMM with one column: (rows x inner) * (inner x 1).
  if (ta == Trans::No) {
    gemm(Trans::No, Trans::No, M, 1, N, alpha, A, x, beta, y);
  } else {
    // y (N) = A^T x: computed as the row vector x^T A, a 1 x N result.
    gemm(Trans::No, Trans::No, 1, N, M, alpha, x, A, beta, y);
  }
}

void axpy(int n, float alpha, const float* x, float* y) {
  for (int i = 0; i < n; ++i) y[i] += alpha * x[i];
}
void axpby(int n, float alpha, const float* x, float beta, float* y) {
  for (int i = 0; i < n; ++i) y[i] = alpha * x[i] + beta * y[i];
}
void scal(int n, float alpha, float* x) {
  if (alpha == 0.f) {
    std::memset(x, 0, sizeof(float) * n);
    return;
  }
  for (int i = 0; i < n; ++i) x[i] *= alpha;
}
void scale(int n, float alpha, const float* x, float* y) {
  for (int i = 0; i < n; ++i) y[i] = alpha * x[i];
}
void copy(int n, const float* x, float* y) {
  if (x != y && n > 0) std::memcpy(y, x, sizeof(float) * n);
}
void set(int n, float value, float* y) {
  if (value == 0.f) {
    if (n > 0) std::memset(y, 0, sizeof(float) * n);
    return;
  }
  for (int i = 0; i < n; ++i) y[i] = value;
}
void add_scalar(int n, float alpha, float* y) {
  for (int i = 0; i < n; ++i) y[i] += alpha;
}
void vadd(int n, const float* a, const float* b, float* y) {
  for (int i = 0; i < n; ++i) y[i] = a[i] + b[i];
}
void vsub(int n, const float* a, const float* b, float* y) {
  for (int i = 0; i < n; ++i) y[i] = a[i] - b[i];
}
void vmul(int n, const float* a, const float* b, float* y) {
  for (int i = 0; i < n; ++i) y[i] = a[i] * b[i];
}
void vdiv(int n, const float* a, const float* b, float* y) {
  for (int i = 0; i < n; ++i) y[i] = a[i] / b[i];
}
void vsqr(int n, const float* a, float* y) {
  for (int i = 0; i < n; ++i) y[i] = a[i] * a[i];
}
void vsqrt(int n, const float* a, float* y) {
  for (int i = 0; i < n; ++i) y[i] = std::sqrt(a[i]);
}
void vexp(int n, const float* a, float* y) {
  for (int i = 0; i < n; ++i) y[i] = std::exp(a[i]);
}
void vlog(int n, const float* a, float* y) {
  for (int i = 0; i < n; ++i) y[i] = std::log(a[i]);
}
void vabs(int n, const float* a, float* y) {
  for (int i = 0; i < n; ++i) y[i] = std::fabs(a[i]);
}
void vpowx(int n, const float* a, float b, float* y) {
  for (int i = 0; i < n; ++i) y[i] = std::pow(a[i], b);
}
float dot(int n, const float* x, const float* y) {
  // Accumulate in double: used for losses and norms, where float sums drift on large n.
  LaneSums<1> s;
  s.Add(n, [&](int i) { return static_cast<double>(x[i]) * y[i]; });
  return static_cast<float>(s.Total());
}
float strided_dot(int n, const float* x, int incx, const float* y, int incy) {
  double s = 0;
  for (int i = 0; i < n; ++i) s += static_cast<double>(x[i * incx]) * y[i * incy];
  return static_cast<float>(s);
}
float asum(int n, const float* x) {
  LaneSums<1> s;
  s.Add(n, [&](int i) { return static_cast<double>(std::fabs(x[i])); });
  return static_cast<float>(s.Total());
}

void rng_uniform(int n, float lo, float hi, float* r) {
  HS_CHECK_LE(lo, hi);
  std::uniform_real_distribution<float> dist(lo, hi);
  auto& g = Context::Get().rng();
  for (int i = 0; i < n; ++i) r[i] = dist(g);
}
void rng_gaussian(int n, float mean, float sigma, float* r) {
  HS_CHECK_GT(sigma, 0.f);
  std::normal_distribution<float> dist(mean, sigma);
  auto& g = Context::Get().rng();
  for (int i = 0; i < n; ++i) r[i] = dist(g);
}
void rng_bernoulli(int n, float p, int* r) {
  HS_CHECK(p >= 0.f && p <= 1.f);
  std::bernoulli_distribution dist(p);
  auto& g = Context::Get().rng();
  for (int i = 0; i < n; ++i) r[i] = dist(g);
}
void rng_bernoulli(int n, float p, unsigned* r) {
  HS_CHECK(p >= 0.f && p <= 1.f);
  std::bernoulli_distribution dist(p);
  auto& g = Context::Get().rng();
  for (int i = 0; i < n; ++i) r[i] = dist(g);
}

// The unsigned compare treats negative rows/columns as out of range in one test.
static inline bool in_range(int a, int b) { return static_cast<unsigned>(a) < static_cast<unsigned>(b); }

int ConvOutSize(int size, int kernel, int pad, int stride, int dilation) {
  return (size + 2 * pad - (dilation * (kernel - 1) + 1)) / stride + 1;
}

void im2col(const float* im, int channels, int height, int width, int kh, int kw, int pad_h,
            int pad_w, int stride_h, int stride_w, int dil_h, int dil_w, float* col) {
  const int out_h = ConvOutSize(height, kh, pad_h, stride_h, dil_h);
  const int out_w = ConvOutSize(width, kw, pad_w, stride_w, dil_w);
  const int plane = height * width;
  for (int c = 0; c < channels; ++c, im += plane) {
    for (int ki = 0; ki < kh; ++ki) {
      for (int kj = 0; kj < kw; ++kj) {
        int row = -pad_h + ki * dil_h;
        for (int oh = 0; oh < out_h; ++oh, row += stride_h) {
          if (!in_range(row, height)) {
            std::memset(col, 0, sizeof(float) * out_w);
            col += out_w;
            continue;
          }
          const float* src = im + row * width;
          int colx = -pad_w + kj * dil_w;
          if (stride_w == 1 && colx >= 0 && colx + out_w <= width) {
            // A plain loop, not memcpy: rows are short (8-32 floats) and the call costs more.
            const float* from = src + colx;
            for (int ow = 0; ow < out_w; ++ow) col[ow] = from[ow];
            col += out_w;
            continue;
          }
          for (int ow = 0; ow < out_w; ++ow, colx += stride_w)
            *col++ = in_range(colx, width) ? src[colx] : 0.f;
        }
      }
    }
  }
}

void im2row(const float* im, int channels, int height, int width, int kh, int kw, int pad_h,
            int pad_w, int stride_h, int stride_w, int dil_h, int dil_w, float* row) {
  const int out_h = ConvOutSize(height, kh, pad_h, stride_h, dil_h);
  const int out_w = ConvOutSize(width, kw, pad_w, stride_w, dil_w);
  const int plane = height * width;
  for (int oh = 0; oh < out_h; ++oh) {
    for (int ow = 0; ow < out_w; ++ow) {
      const int c0 = ow * stride_w - pad_w;
      const bool inside_w = c0 >= 0 && c0 + dil_w * (kw - 1) < width;
      for (int c = 0; c < channels; ++c) {
        const float* src = im + c * plane;
        for (int ki = 0; ki < kh; ++ki) {
          const int r = oh * stride_h - pad_h + ki * dil_h;
          if (!in_range(r, height)) {
            for (int kj = 0; kj < kw; ++kj) *row++ = 0.f;
            continue;
          }
          // Index from the row's start: `line + c0` would point before the image when the
          // window starts in the left padding (c0 < 0), undefined even if never read.
          const float* line = src + r * width;
          if (inside_w) {
            for (int kj = 0; kj < kw; ++kj) *row++ = line[c0 + kj * dil_w];
          } else {
            for (int kj = 0; kj < kw; ++kj) {
              const int c = c0 + kj * dil_w;
              *row++ = in_range(c, width) ? line[c] : 0.f;
            }
          }
        }
      }
    }
  }
}

void col2im(const float* col, int channels, int height, int width, int kh, int kw, int pad_h,
            int pad_w, int stride_h, int stride_w, int dil_h, int dil_w, float* im) {
  const int out_h = ConvOutSize(height, kh, pad_h, stride_h, dil_h);
  const int out_w = ConvOutSize(width, kw, pad_w, stride_w, dil_w);
  const int plane = height * width;
  for (int c = 0; c < channels; ++c, im += plane) {
    for (int ki = 0; ki < kh; ++ki) {
      for (int kj = 0; kj < kw; ++kj) {
        int row = -pad_h + ki * dil_h;
        for (int oh = 0; oh < out_h; ++oh, row += stride_h) {
          if (!in_range(row, height)) {
            col += out_w;
            continue;
          }
          float* dst = im + row * width;
          int colx = -pad_w + kj * dil_w;
          if (stride_w == 1 && colx >= 0 && colx + out_w <= width) {
            float* d = dst + colx;
            for (int ow = 0; ow < out_w; ++ow) d[ow] += col[ow];
            col += out_w;
            continue;
          }
          for (int ow = 0; ow < out_w; ++ow, colx += stride_w, ++col)
            if (in_range(colx, width)) dst[colx] += *col;
        }
      }
    }
  }
}

}  // namespace hogstream
