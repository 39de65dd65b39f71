// GPU twins of BatchNorm (with the Scale and ReLU the Net fuses into it) and Scale: the CPU
// layers' expressions, element for element, and their sums per channel in double. A channel's
// statistics are one block's reduction (one block per channel); everything else is one thread
// per element. The per-channel numbers (mean, variance, sqrt(var + eps), and the backward
// pass's means) stay on the device, in `stats_`.
#include "core/gpu_common.cuh"
#include "core/layers/batch_norm_layer.hpp"
#include "core/layers/scale_layer.hpp"

namespace hogstream {

namespace {

// A blob as num x channels x spatial; the k-th value of channel c (k < num * spatial).
struct Planes {
  int num, channels, spatial;
};
__device__ __forceinline__ long long At(const Planes& p, int c, long long k) {
  return (k / p.spatial * p.channels + c) * p.spatial + k % p.spatial;
}
__device__ __forceinline__ int ChannelOf(const Planes& p, long long k) { return static_cast<int>(k / p.spatial % p.channels); }

// The stats of one channel, three floats: mean, variance (batch statistics only), sqrt(var + eps).
constexpr int kStats = 3;

// Batch statistics, one block per channel: the mean, then the mean squared deviation from it
// (two passes, in double, as the CPU layer).
__global__ void BatchStats(Planes p, const float* x, float eps, float* st) {
  const int c = blockIdx.x;
  const long long m = static_cast<long long>(p.num) * p.spatial;
  double sum = 0;
  for (long long k = threadIdx.x; k < m; k += blockDim.x) sum += x[At(p, c, k)];
  __shared__ float mean_s;
  BlockTotals t = BlockReduce(sum, 0, 0);
  if (threadIdx.x == 0) mean_s = static_cast<float>(t.sum / m);
  __syncthreads();
  const float mean = mean_s;
  double sq = 0;
  for (long long k = threadIdx.x; k < m; k += blockDim.x) {
    const float d = x[At(p, c, k)] - mean;
    sq += static_cast<double>(d * d);
  }
  t = BlockReduce(sq, 0, 0);
  if (threadIdx.x == 0) {
    const float var = static_cast<float>(t.sum / m);
    st[kStats * c] = mean;
    st[kStats * c + 1] = var;
    st[kStats * c + 2] = sqrtf(var + eps);
  }
}

// The stored statistics: the running sums over their factor.
__global__ void StoredStats(int channels, const float* mean_sum, const float* var_sum, const float* factor,
                            float eps, float* st) {
  HS_GPU_LOOP(c, channels) {
    const float f = factor[0] == 0.f ? 0.f : 1.f / factor[0];
    st[kStats * c] = f * mean_sum[c];
    st[kStats * c + 2] = sqrtf(f * var_sum[c] + eps);
  }
}

// y = relu(v * s + b) with v = (x - mean) / sd (the Scale and the ReLU when fused), v kept in
// xn when asked. In place: each x is read before its y is written.
__global__ void Normalize(long long n, Planes p, const float* x, const float* st, const float* s, const float* b,
                          bool relu, float* y, float* xn) {
  HS_GPU_LOOP(k, n) {
    const int c = ChannelOf(p, k);
    const float v = (x[k] - st[kStats * c]) / st[kStats * c + 2];
    if (xn) xn[k] = v;
    float z = v;
    if (s) z = b ? v * s[c] + b[c] : v * s[c];
    if (relu) z = z < 0.f ? 0.f : z;  // (std::max(z, 0): NaN stays NaN)
    y[k] = z;
  }
}

// The running sums: s <- fraction * s + statistic (the variance unbiased), factor <- fraction * factor + 1.
__global__ void RunningSums(int channels, const float* st, float fraction, float unbiased, float* mean_sum,
                            float* var_sum, float* factor) {
  HS_GPU_LOOP(c, channels) {
    mean_sum[c] = st[kStats * c] + fraction * mean_sum[c];
    var_sum[c] = unbiased * st[kStats * c + 1] + fraction * var_sum[c];
    if (c == 0) factor[0] = factor[0] * fraction + 1.f;
  }
}

// dz of the fused chain from the blob's gradient dr (the ReLU's top) as the ReLU takes it.
__device__ __forceinline__ float ReluGrad(bool relu, float r, float dr) { return relu ? (r > 0.f ? dr : 0.f * dr) : dr; }

// One block per channel, the backward's means: of g and of g * y, where g is the layer's top
// gradient (fused: dz * s, with the Scale's sums of dz and dz * y added into db and ds).
__global__ void BackwardSums(Planes p, const float* g, const float* y, const float* r, const float* s, bool fused,
                             bool relu, float* ds, float* db, float* means) {
  const int c = blockIdx.x;
  const long long m = static_cast<long long>(p.num) * p.spatial;
  double sg = 0, sgy = 0, sz = 0, szy = 0;
  for (long long k = threadIdx.x; k < m; k += blockDim.x) {
    const long long i = At(p, c, k);
    float dy = g[i];
    if (fused) {
      const float dz = ReluGrad(relu, r[i], g[i]);
      sz += dz;
      szy += dz * y[i];
      dy = dz * s[c];
    }
    sg += dy;
    sgy += dy * y[i];
  }
  BlockTotals t = BlockReduce(sg, 0, 0);
  if (threadIdx.x == 0) means[2 * c] = static_cast<float>(t.sum / m);
  t = BlockReduce(sgy, 0, 0);
  if (threadIdx.x == 0) means[2 * c + 1] = static_cast<float>(t.sum / m);
  if (!fused) return;
  t = BlockReduce(sz, 0, 0);
  if (threadIdx.x == 0 && db) db[c] += static_cast<float>(t.sum);
  t = BlockReduce(szy, 0, 0);
  if (threadIdx.x == 0 && ds) ds[c] += static_cast<float>(t.sum);
}

// dx = (g - mean(g) - mean(g * y) * y) / sd with batch statistics, g / sd with stored ones; g
// as above (fused: from dr). dx may be the gradient it reads (in place).
__global__ void BackwardDx(long long n, Planes p, const float* g, const float* y, const float* r, const float* s,
                           bool fused, bool relu, bool batch, const float* st, const float* means, float* dx) {
  HS_GPU_LOOP(k, n) {
    const int c = ChannelOf(p, k);
    const float dy = fused ? ReluGrad(relu, r[k], g[k]) * s[c] : g[k];
    const float sd = st[kStats * c + 2];
    dx[k] = batch ? (dy - means[2 * c] - means[2 * c + 1] * y[k]) / sd : dy / sd;
  }
}

// Scale: y = x * s[d] (+ b[d]), d the middle index of outer x dim x inner; in place the input
// is kept in `keep` in the same pass.
__global__ void ScaleForward(long long n, int dim, int inner, const float* x, const float* s, const float* b, float* y,
                             float* keep) {
  HS_GPU_LOOP(k, n) {
    const int d = static_cast<int>(k / inner % dim);
    const float v = x[k];
    if (keep) keep[k] = v;
    y[k] = b ? v * s[d] + b[d] : v * s[d];
  }
}
// One block per scale element d: the sums of dy and dy * x over its outer x inner values.
__global__ void ScaleSums(int outer, int dim, int inner, const float* dy, const float* x, bool assign, float* ds,
                          float* db) {
  const int d = blockIdx.x;
  const long long m = static_cast<long long>(outer) * inner;
  double s1 = 0, s2 = 0;
  for (long long k = threadIdx.x; k < m; k += blockDim.x) {
    const long long i = (k / inner * dim + d) * inner + k % inner;
    s1 += dy[i];
    s2 += static_cast<double>(dy[i]) * x[i];
  }
  BlockTotals t = BlockReduce(s1, 0, 0);
  if (threadIdx.x == 0 && db) db[d] += static_cast<float>(t.sum);
  t = BlockReduce(s2, 0, 0);
  if (threadIdx.x == 0 && ds) ds[d] = (assign ? 0.f : ds[d]) + static_cast<float>(t.sum);
}
__global__ void ScaleDx(long long n, int dim, int inner, const float* dy, const float* s, float* dx) {
  HS_GPU_LOOP(k, n) dx[k] = dy[k] * s[static_cast<int>(k / inner % dim)];
}

}  // namespace

class BatchNormGpuLayer : public BatchNormLayer {
 public:
  using BatchNormLayer::BatchNormLayer;

  void FusedScaleBackwardGpu(const Blob& blob, float* ds, float* db) override { Sums(blob, ds, db); }

 protected:
  Planes Shape(const Blob& b) const {
    const int num = b.shape(0);
    return {num, channels_, static_cast<int>(b.count() / (static_cast<long long>(num) * channels_))};
  }

  void Forward_gpu(const Blobs& bottom, const Blobs& top) override {
    const Planes p = Shape(*bottom[0]);
    const long long n = bottom[0]->count();
    stats_.Reshape(std::vector<int>{kStats * channels_});
    means_.Reshape(std::vector<int>{2 * channels_});
    float* st = stats_.mutable_gpu_data();
    if (use_global_stats_) {
      HS_LAUNCH(StoredStats, channels_, blobs_[0]->gpu_data(), blobs_[1]->gpu_data(), blobs_[2]->gpu_data(), eps_, st);
    } else {
      BatchStats<<<channels_, kGpuThreads, 0, GpuStream()>>>(p, bottom[0]->gpu_data(), eps_, st);
      HS_KERNEL_CHECK("BatchNorm statistics");
    }
    const float* sv = scale_ ? scale_->blobs()[0]->gpu_data() : nullptr;
    const float* bv = scale_ && scale_->bias() ? scale_->bias()->gpu_data() : nullptr;
    float* xn = use_global_stats_ && !keep_norm_ ? nullptr : x_norm_.mutable_gpu_data();
    HS_LAUNCH(Normalize, n, p, bottom[0]->gpu_data(), st, sv, bv, relu_, top[0]->mutable_gpu_data(), xn);
    sums_ready_ = false;
    if (!use_global_stats_) {
      const long long per_channel = n / channels_;
      const float unbiased = per_channel > 1 ? static_cast<float>(per_channel) / (per_channel - 1) : 1.f;
      HS_LAUNCH(RunningSums, channels_, st, moving_average_fraction_, unbiased, blobs_[0]->mutable_gpu_data(),
                blobs_[1]->mutable_gpu_data(), blobs_[2]->mutable_gpu_data());
    }
  }

  // The backward's means (and, fused, the Scale's sums into ds and db) from the blob's gradient.
  void Sums(const Blob& blob, float* ds, float* db) {
    const bool fused = scale_ != nullptr;
    BackwardSums<<<channels_, kGpuThreads, 0, GpuStream()>>>(
        Shape(blob), blob.gpu_diff(), x_norm_.gpu_data(), fused ? blob.gpu_data() : nullptr,
        fused ? scale_->blobs()[0]->gpu_data() : nullptr, fused, relu_, ds, db, means_.mutable_gpu_data());
    HS_KERNEL_CHECK("BatchNorm backward sums");
    sums_ready_ = true;
  }

  void Backward_gpu(const Blobs& top, const std::vector<bool>& propagate_down, const Blobs& bottom) override {
    if (!propagate_down[0]) return;
    const bool fused = scale_ != nullptr;
    if (!use_global_stats_ && !sums_ready_) Sums(*top[0], nullptr, nullptr);
    const long long n = bottom[0]->count();
    HS_LAUNCH(BackwardDx, n, Shape(*bottom[0]), top[0]->gpu_diff(),
              use_global_stats_ ? nullptr : x_norm_.gpu_data(), fused ? top[0]->gpu_data() : nullptr,
              fused ? scale_->blobs()[0]->gpu_data() : nullptr, fused, relu_, !use_global_stats_, stats_.gpu_data(),
              means_.gpu_data(), bottom[0]->mutable_gpu_diff());
    sums_ready_ = false;
  }

 private:
  Blob stats_;  // per channel: mean, variance, sqrt(var + eps)
  Blob means_;  // per channel: the backward's mean(g), mean(g * y)
};

class ScaleGpuLayer : public ScaleLayer {
 public:
  using ScaleLayer::ScaleLayer;

 protected:
  void Forward_gpu(const Blobs& bottom, const Blobs& top) override {
    if (bn_) return;  // done by the BatchNorm
    const bool in_place = bottom[0] == top[0];
    const float* s = (bottom.size() > 1 ? bottom[1] : blobs_[0].get())->gpu_data();
    const float* b = bias_index_ >= 0 ? blobs_[bias_index_]->gpu_data() : nullptr;
    HS_LAUNCH(ScaleForward, top[0]->count(), scale_dim_, inner_, bottom[0]->gpu_data(), s, b,
              top[0]->mutable_gpu_data(), in_place ? bottom_copy_.mutable_gpu_data() : nullptr);
  }

  void Backward_gpu(const Blobs& top, const std::vector<bool>& propagate_down, const Blobs& bottom) override {
    const bool want_db = bias_index_ >= 0 && param_propagate_down(bias_index_);
    if (bn_) {  // the BatchNorm keeps this layer's input; the sums serve both layers
      bn_->FusedScaleBackwardGpu(*top[0], param_propagate_down(0) ? blobs_[0]->mutable_gpu_diff() : nullptr,
                                 want_db ? blobs_[bias_index_]->mutable_gpu_diff() : nullptr);
      return;
    }
    const bool in_place = bottom[0] == top[0];
    const bool learned = bottom.size() == 1;
    Blob* scale_blob = learned ? blobs_[0].get() : bottom[1];
    const bool want_ds = learned ? param_propagate_down(0) : static_cast<bool>(propagate_down[1]);
    if (want_db || want_ds) {
      ScaleSums<<<scale_dim_, kGpuThreads, 0, GpuStream()>>>(
          outer_, scale_dim_, inner_, top[0]->gpu_diff(), in_place ? bottom_copy_.gpu_data() : bottom[0]->gpu_data(),
          !learned, want_ds ? scale_blob->mutable_gpu_diff() : nullptr,
          want_db ? blobs_[bias_index_]->mutable_gpu_diff() : nullptr);
      HS_KERNEL_CHECK("Scale sums");
    }
    if (propagate_down[0])
      HS_LAUNCH(ScaleDx, top[0]->count(), scale_dim_, inner_, top[0]->gpu_diff(), scale_blob->gpu_data(),
                bottom[0]->mutable_gpu_diff());
  }
};

HS_REGISTER_GPU_LAYER(BatchNorm, BatchNormGpuLayer);
HS_REGISTER_GPU_LAYER(Scale, ScaleGpuLayer);

}  // namespace hogstream
