// GPU twin of Pooling (MAX and AVE, NCHW): one thread per output element forward; backward
// gathers, one thread per input element over the windows that cover it, so no two threads
// write one element. Windows, padding, CEIL's clipped last window and the AVE divisor (clipped
// to H + pad, not H) are the CPU layer's; MAX keeps the first maximum (">") and skips NaN,
// with -1 for a window that has no number.
#include <cfloat>

#include "core/gpu_common.cuh"
#include "core/layers/pooling_layer.hpp"

namespace hogstream {

namespace {

struct Geometry {
  int height, width, pooled_h, pooled_w, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w;
};

__global__ void MaxForward(long long n, Geometry g, const float* x, float* y, int* mask, float* mask_top) {
  HS_GPU_LOOP(k, n) {
    const int pw = k % g.pooled_w, ph = k / g.pooled_w % g.pooled_h;
    const long long plane = k / (static_cast<long long>(g.pooled_w) * g.pooled_h);
    const int hs = max(ph * g.stride_h - g.pad_h, 0), ws = max(pw * g.stride_w - g.pad_w, 0);
    const int he = min(ph * g.stride_h - g.pad_h + g.kernel_h, g.height);
    const int we = min(pw * g.stride_w - g.pad_w + g.kernel_w, g.width);
    const float* in = x + plane * g.height * g.width;
    float best = -FLT_MAX;
    int arg = -1;
    for (int h = hs; h < he; ++h)
      for (int w = ws; w < we; ++w) {
        const float v = in[h * g.width + w];
        if (v > best) {  // nothing above -FLT_MAX (NaN, -inf) leaves the mask -1
          best = v;
          arg = h * g.width + w;
        }
      }
    y[k] = best;
    mask[k] = arg;
    if (mask_top) mask_top[k] = static_cast<float>(arg);
  }
}

__global__ void AveForward(long long n, Geometry g, const float* x, float* y) {
  HS_GPU_LOOP(k, n) {
    const int pw = k % g.pooled_w, ph = k / g.pooled_w % g.pooled_h;
    const long long plane = k / (static_cast<long long>(g.pooled_w) * g.pooled_h);
    int hs = ph * g.stride_h - g.pad_h, ws = pw * g.stride_w - g.pad_w;
    int he = min(hs + g.kernel_h, g.height + g.pad_h), we = min(ws + g.kernel_w, g.width + g.pad_w);
    const int size = (he - hs) * (we - ws);
    hs = max(hs, 0);
    ws = max(ws, 0);
    he = min(he, g.height);
    we = min(we, g.width);
    const float* in = x + plane * g.height * g.width;
    float sum = 0.f;
    for (int h = hs; h < he; ++h)
      for (int w = ws; w < we; ++w) sum += in[h * g.width + w];
    y[k] = sum / size;
  }
}

// The output rows [*begin, *end) whose windows hold input row h (same for columns).
__device__ __forceinline__ void Covering(int h, int kernel, int stride, int pad, int pooled, int* begin, int* end) {
  *begin = h + pad < kernel ? 0 : (h + pad - kernel) / stride + 1;
  *end = min((h + pad) / stride + 1, pooled);
}
// Input element k: its place (h, w), its plane's first output, and the outputs covering it.
struct Cover {
  int h, w, phs, phe, pws, pwe;
  long long off;
};
__device__ __forceinline__ Cover Covers(long long k, const Geometry& g) {
  Cover c;
  c.w = k % g.width;
  c.h = k / g.width % g.height;
  c.off = k / (static_cast<long long>(g.width) * g.height) * g.pooled_h * g.pooled_w;
  Covering(c.h, g.kernel_h, g.stride_h, g.pad_h, g.pooled_h, &c.phs, &c.phe);
  Covering(c.w, g.kernel_w, g.stride_w, g.pad_w, g.pooled_w, &c.pws, &c.pwe);
  return c;
}

__global__ void MaxBackward(long long n, Geometry g, const float* dy, const int* mask, float* dx) {
  HS_GPU_LOOP(k, n) {
    const Cover c = Covers(k, g);
    const int self = c.h * g.width + c.w;
    float sum = 0.f;
    for (int ph = c.phs; ph < c.phe; ++ph)
      for (int pw = c.pws; pw < c.pwe; ++pw)
        if (mask[c.off + ph * g.pooled_w + pw] == self) sum += dy[c.off + ph * g.pooled_w + pw];
    dx[k] = sum;
  }
}

__global__ void AveBackward(long long n, Geometry g, const float* dy, float* dx) {
  HS_GPU_LOOP(k, n) {
    const Cover c = Covers(k, g);
    float sum = 0.f;
    for (int ph = c.phs; ph < c.phe; ++ph)
      for (int pw = c.pws; pw < c.pwe; ++pw) {
        const int hs = ph * g.stride_h - g.pad_h, ws = pw * g.stride_w - g.pad_w;
        const int he = min(hs + g.kernel_h, g.height + g.pad_h), we = min(ws + g.kernel_w, g.width + g.pad_w);
        sum += dy[c.off + ph * g.pooled_w + pw] / ((he - hs) * (we - ws));
      }
    dx[k] = sum;
  }
}

}  // namespace

class PoolingGpuLayer : public PoolingLayer {
 public:
  using PoolingLayer::PoolingLayer;

 protected:
  Geometry Shape() const {
    return {height_, width_, pooled_h_, pooled_w_, kernel_h_, kernel_w_, stride_h_, stride_w_, pad_h_, pad_w_};
  }
  void Forward_gpu(const Blobs& bottom, const Blobs& top) override {
    const long long n = top[0]->count();
    if (max_) {
      gpu_mask_.ReshapeLike(*top[0]);
      MaxForward<<<GpuBlocks(n), kGpuThreads, 0, GpuStream()>>>(
          n, Shape(), bottom[0]->gpu_data(), top[0]->mutable_gpu_data(),
          reinterpret_cast<int*>(gpu_mask_.mutable_gpu_data()), top.size() > 1 ? top[1]->mutable_gpu_data() : nullptr);
    } else {
      AveForward<<<GpuBlocks(n), kGpuThreads, 0, GpuStream()>>>(n, Shape(), bottom[0]->gpu_data(),
                                                               top[0]->mutable_gpu_data());
    }
    HS_KERNEL_CHECK("Pooling forward");
  }
  void Backward_gpu(const Blobs& top, const std::vector<bool>& propagate_down, const Blobs& bottom) override {
    if (!propagate_down[0]) return;
    const long long n = bottom[0]->count();
    if (max_) {
      MaxBackward<<<GpuBlocks(n), kGpuThreads, 0, GpuStream()>>>(
          n, Shape(), top[0]->gpu_diff(), reinterpret_cast<const int*>(gpu_mask_.gpu_data()),
          bottom[0]->mutable_gpu_diff());
    } else {
      AveBackward<<<GpuBlocks(n), kGpuThreads, 0, GpuStream()>>>(n, Shape(), top[0]->gpu_diff(),
                                                                bottom[0]->mutable_gpu_diff());
    }
    HS_KERNEL_CHECK("Pooling backward");
  }

 private:
  Blob gpu_mask_;  // MAX: the argmax of every output, as int bits
};

HS_REGISTER_GPU_LAYER(Pooling, PoolingGpuLayer);

}  // namespace hogstream
