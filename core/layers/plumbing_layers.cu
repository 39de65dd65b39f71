// GPU twins of the layers that route values rather than compute them: Split (its backward
// sums the tops' gradients), Concat (copies along the axis) and Eltwise (SUM with coefficients,
// PROD, MAX). Their CPU twins' semantics, element for element: see the CPU classes.
#include "core/gpu_common.cuh"
#include "core/layers/concat_layer.hpp"
#include "core/layers/eltwise_layer.hpp"
#include "core/layers/split_layer.hpp"
#include "core/math_gpu.hpp"

namespace hogstream {

namespace {

__global__ void Multiply(long long n, const float* a, const float* b, float* y) {
  HS_GPU_LOOP(i, n) y[i] = a[i] * b[i];
}
__global__ void Divide(long long n, const float* a, const float* b, float* y) {
  HS_GPU_LOOP(i, n) y[i] = a[i] / b[i];
}
// MAX over bottoms: the first pair, then each further bottom; ties keep the earlier bottom
// except in the first pair, where b wins a tie (the CPU's `a > b`).
__global__ void MaxFirst(long long n, const float* a, const float* b, float* y, int* mask) {
  HS_GPU_LOOP(i, n) {
    const bool first = a[i] > b[i];
    y[i] = first ? a[i] : b[i];
    mask[i] = first ? 0 : 1;
  }
}
__global__ void MaxNext(long long n, int index, const float* x, float* y, int* mask) {
  HS_GPU_LOOP(i, n) {
    if (x[i] > y[i]) {
      y[i] = x[i];
      mask[i] = index;
    }
  }
}
__global__ void MaxBackward(long long n, int index, const int* mask, const float* dy, float* dx) {
  HS_GPU_LOOP(i, n) dx[i] = mask[i] == index ? dy[i] : 0.f;
}

// Concat: bottom element k (outer o, then len along the axis and inner) at its place in the
// top; `to_top` false goes the other way (backward).
__global__ void ConcatCopy(long long n, long long len, long long top_len, long long offset, bool to_top,
                           const float* from, float* to) {
  HS_GPU_LOOP(k, n) {
    const long long o = k / len, r = k % len;
    const long long t = o * top_len + offset + r;
    if (to_top) {
      to[t] = from[k];
    } else {
      to[k] = from[t];
    }
  }
}

}  // namespace

class SplitGpuLayer : public SplitLayer {
 public:
  using SplitLayer::SplitLayer;

 protected:
  void Forward_gpu(const Blobs& bottom, const Blobs& top) override { Forward_cpu(bottom, top); }  // shares
  void Backward_gpu(const Blobs& top, const std::vector<bool>& propagate_down, const Blobs& bottom) override {
    if (!propagate_down[0]) return;
    const int n = bottom[0]->count();
    float* dx = bottom[0]->mutable_gpu_diff();
    gpu_copy(n, top[0]->gpu_diff(), dx);
    for (size_t i = 1; i < top.size(); ++i) gpu_axpy(n, 1.f, top[i]->gpu_diff(), dx);
  }
};

class ConcatGpuLayer : public ConcatLayer {
 public:
  using ConcatLayer::ConcatLayer;

 protected:
  void Forward_gpu(const Blobs& bottom, const Blobs& top) override {
    if (bottom.size() == 1) return;  // top shares the bottom
    const long long top_len = static_cast<long long>(top[0]->shape(axis_)) * inner_;
    float* y = top[0]->mutable_gpu_data();
    long long offset = 0;
    for (Blob* b : bottom) {
      const long long len = static_cast<long long>(b->shape(axis_)) * inner_;
      HS_LAUNCH(ConcatCopy, len * outer_, len, top_len, offset, true, b->gpu_data(), y);
      offset += len;
    }
  }
  void Backward_gpu(const Blobs& top, const std::vector<bool>& propagate_down, const Blobs& bottom) override {
    if (bottom.size() == 1) return;
    const long long top_len = static_cast<long long>(top[0]->shape(axis_)) * inner_;
    const float* dy = top[0]->gpu_diff();
    long long offset = 0;
    for (size_t i = 0; i < bottom.size(); ++i) {
      const long long len = static_cast<long long>(bottom[i]->shape(axis_)) * inner_;
      if (propagate_down[i])
        HS_LAUNCH(ConcatCopy, len * outer_, len, top_len, offset, false, dy, bottom[i]->mutable_gpu_diff());
      offset += len;
    }
  }
};

class EltwiseGpuLayer : public EltwiseLayer {
 public:
  using EltwiseLayer::EltwiseLayer;

 protected:
  void Forward_gpu(const Blobs& bottom, const Blobs& top) override {
    const long long n = top[0]->count();
    float* y = top[0]->mutable_gpu_data();
    switch (op_) {
      case pb::EltwiseParameter::PROD:
        HS_LAUNCH(Multiply, n, bottom[0]->gpu_data(), bottom[1]->gpu_data(), y);
        for (size_t i = 2; i < bottom.size(); ++i) HS_LAUNCH(Multiply, n, y, bottom[i]->gpu_data(), y);
        break;
      case pb::EltwiseParameter::SUM:
        gpu_scale(static_cast<int>(n), coeff_[0], bottom[0]->gpu_data(), y);
        for (size_t i = 1; i < bottom.size(); ++i) gpu_axpy(static_cast<int>(n), coeff_[i], bottom[i]->gpu_data(), y);
        break;
      case pb::EltwiseParameter::MAX: {
        gpu_mask_.ReshapeLike(*top[0]);
        int* mask = reinterpret_cast<int*>(gpu_mask_.mutable_gpu_data());
        HS_LAUNCH(MaxFirst, n, bottom[0]->gpu_data(), bottom[1]->gpu_data(), y, mask);
        for (size_t i = 2; i < bottom.size(); ++i) HS_LAUNCH(MaxNext, n, static_cast<int>(i), bottom[i]->gpu_data(), y, mask);
        break;
      }
    }
  }
  void Backward_gpu(const Blobs& top, const std::vector<bool>& propagate_down, const Blobs& bottom) override {
    const long long n = top[0]->count();
    const float* dy = top[0]->gpu_diff();
    for (size_t i = 0; i < bottom.size(); ++i) {
      if (!propagate_down[i]) continue;
      float* dx = bottom[i]->mutable_gpu_diff();
      switch (op_) {
        case pb::EltwiseParameter::PROD:
          if (param_.eltwise_param().stable_prod_grad()) {
            const size_t first = i == 0 ? 1 : 0;
            gpu_copy(static_cast<int>(n), bottom[first]->gpu_data(), dx);
            for (size_t j = first + 1; j < bottom.size(); ++j)
              if (j != i) HS_LAUNCH(Multiply, n, dx, bottom[j]->gpu_data(), dx);
          } else {
            HS_LAUNCH(Divide, n, top[0]->gpu_data(), bottom[i]->gpu_data(), dx);
          }
          HS_LAUNCH(Multiply, n, dx, dy, dx);
          break;
        case pb::EltwiseParameter::SUM:
          gpu_scale(static_cast<int>(n), coeff_[i], dy, dx);
          break;
        case pb::EltwiseParameter::MAX:
          HS_LAUNCH(MaxBackward, n, static_cast<int>(i), reinterpret_cast<const int*>(gpu_mask_.gpu_data()), dy, dx);
          break;
      }
    }
  }

 private:
  Blob gpu_mask_;  // MAX: the bottom holding each maximum, as int bits
};

HS_REGISTER_GPU_LAYER(Split, SplitGpuLayer);
HS_REGISTER_GPU_LAYER(Concat, ConcatGpuLayer);
HS_REGISTER_GPU_LAYER(Eltwise, EltwiseGpuLayer);

}  // namespace hogstream
