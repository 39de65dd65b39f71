// GPU twins of the math in core/math.hpp, on the calling thread's Context stream and cuBLAS
// handle. Declared only on CUDA builds and compiled into the hogstream_gpu library (so CPU
// programs never load cuBLAS); every kernel is checked against its CPU twin in
// test/core/math_gpu_test.cc.
#pragma once

#ifdef HOGSTREAM_CUDA

#include "core/math.hpp"

namespace hogstream {

void gpu_gemm(Trans ta, Trans tb, int M, int N, int K, float alpha, const float* A,
              const float* B, float beta, float* C);
void gpu_axpy(int n, float alpha, const float* x, float* y);
void gpu_scal(int n, float alpha, float* x);
void gpu_scale(int n, float alpha, const float* x, float* y);  // y = alpha x
void gpu_copy(int n, const float* x, float* y);                // on the stream; x == y: nothing
void gpu_set(int n, float value, float* y);
void gpu_relu(int n, float slope, const float* x, float* y);
// Waits for the Context stream.
void gpu_sync();

}  // namespace hogstream

#endif  // HOGSTREAM_CUDA
