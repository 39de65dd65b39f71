// CPU math used by the layers and solvers. Matrices are row-major. GEMM/GEMV go to oneDNN's
// sgemm (measured ~2x OpenBLAS 0.3.21 on this project's Zen 5 hosts, where OpenBLAS falls
// back to AVX2 kernels); the element-wise helpers are plain loops the compiler vectorises.
// Random draws use the calling thread's Context generator.
#pragma once

#include <cmath>
#include <cstdint>

namespace hogstream {

enum class Trans { No, Yes };

// The logistic function, 1 / (1 + e^-x): the gates of LSTM and recurrent units.
inline float Sigmoid(float x) { return 1.f / (1.f + std::exp(-x)); }

// C = alpha * op(A) * op(B) + beta * C, with op(A) M x K, op(B) K x N, C M x N.
void gemm(Trans ta, Trans tb, int M, int N, int K, float alpha, const float* A, const float* B,
          float beta, float* C);
// The same with explicit leading dimensions (row strides) for sub-matrices.
void gemm(Trans ta, Trans tb, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc);
// y = alpha * op(A) * x + beta * y, with A M x N.
void gemv(Trans ta, int M, int N, float alpha, const float* A, const float* x, float beta,
          float* y);

void axpy(int n, float alpha, const float* x, float* y);                 // y += a x
void axpby(int n, float alpha, const float* x, float beta, float* y);    // y = a x + b y
void scal(int n, float alpha, float* x);                                 // x *= a
void scale(int n, float alpha, const float* x, float* y);                // y = a x
void copy(int n, const float* x, float* y);
void set(int n, float value, float* y);
void add_scalar(int n, float alpha, float* y);
void vadd(int n, const float* a, const float* b, float* y);
void vsub(int n, const float* a, const float* b, float* y);
void vmul(int n, const float* a, const float* b, float* y);
void vdiv(int n, const float* a, const float* b, float* y);
void vsqr(int n, const float* a, float* y);
void vsqrt(int n, const float* a, float* y);
void vexp(int n, const float* a, float* y);
void vlog(int n, const float* a, float* y);
void vabs(int n, const float* a, float* y);
void vpowx(int n, const float* a, float b, float* y);
float dot(int n, const float* x, const float* y);
float strided_dot(int n, const float* x, int incx, const float* y, int incy);
float asum(int n, const float* x);

void rng_uniform(int n, float lo, float hi, float* r);
void rng_gaussian(int n, float mean, float sigma, float* r);
void rng_bernoulli(int n, float p, int* r);
void rng_bernoulli(int n, float p, unsigned* r);

// Output size of a convolution along one axis (floor division, as Caffe).
int ConvOutSize(int size, int kernel, int pad, int stride, int dilation);

// 2-d image <-> column buffer for convolution: col is (C * kh * kw) x (out_h * out_w).
void im2col(const float* im, int channels, int height, int width, int kh, int kw, int pad_h,
            int pad_w, int stride_h, int stride_w, int dil_h, int dil_w, float* col);
// The transposed lowering: row is (out_h * out_w) x (C * kh * kw), so that the weight gradient
// dW = dY * row becomes a plain (untransposed) GEMM, 2-5x faster than dY * col^T when C*kh*kw
// is small.
void im2row(const float* im, int channels, int height, int width, int kh, int kw, int pad_h,
            int pad_w, int stride_h, int stride_w, int dil_h, int dil_w, float* row);
// Accumulates the column buffer back into `im` (which the caller zeroes).
void col2im(const float* col, int channels, int height, int width, int kh, int kw, int pad_h,
            int pad_w, int stride_h, int stride_w, int dil_h, int dil_w, float* im);

}  // namespace hogstream
