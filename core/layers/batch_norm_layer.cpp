#include "core/layers/batch_norm_layer.hpp"

#include <cmath>

#include "core/math.hpp"

namespace hogstream {

void BatchNormLayer::LayerSetUp(const Blobs& bottom, const Blobs& top) {
  const pb::BatchNormParameter& p = param_.batch_norm_param();
  use_global_stats_ = p.has_use_global_stats() ? p.use_global_stats() : phase_ == pb::TEST;
  moving_average_fraction_ = p.moving_average_fraction();
  eps_ = p.eps();
  HS_REQUIRE(bottom[0]->num_axes() >= 1) << "input must have at least one axis";
  channels_ = bottom[0]->num_axes() == 1 ? 1 : bottom[0]->shape(1);
  blobs_ = {std::make_shared<Blob>(std::vector<int>{channels_}),
            std::make_shared<Blob>(std::vector<int>{channels_}),
            std::make_shared<Blob>(std::vector<int>{1})};
  for (int i = 0; i < 3; ++i) {
    set(blobs_[i]->count(), 0.f, blobs_[i]->mutable_cpu_data());
    // As Caffe does, mask the statistics from the solver with lr_mult 0.
    if (param_.param_size() == i) param_.add_param()->set_lr_mult(0.f);
    HS_REQUIRE(param_.param(i).lr_mult() == 0.f)
        << "BatchNorm statistics are not learned: param " << i << " must have lr_mult 0";
    set_param_propagate_down(i, false);
  }
}

void BatchNormLayer::Reshape(const Blobs& bottom, const Blobs& top) {
  HS_REQUIRE(bottom[0]->num_axes() >= 1) << "input must have at least one axis";
  const int channels = bottom[0]->num_axes() == 1 ? 1 : bottom[0]->shape(1);
  HS_REQUIRE(channels == channels_) << "input " << bottom[0]->shape_string() << " has "
                                    << channels << " channels, the layer " << channels_;
  top[0]->ReshapeLike(*bottom[0]);
  mean_.resize(channels_);
  std_.resize(channels_);
  if (!use_global_stats_) x_norm_.ReshapeLike(*bottom[0]);
}

void BatchNormLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  const int num = bottom[0]->shape(0), count = bottom[0]->count();
  const int spatial = count / (num * channels_);
  const float* x = bottom[0]->cpu_data();
  std::vector<float>& var = std_;  // holds the variance until the square root below
  if (use_global_stats_) {
    const float stored = blobs_[2]->cpu_data()[0];
    const float factor = stored == 0.f ? 0.f : 1.f / stored;
    scale(channels_, factor, blobs_[0]->cpu_data(), mean_.data());
    scale(channels_, factor, blobs_[1]->cpu_data(), var.data());
  } else {
    const double m = static_cast<double>(num) * spatial;
    for (int c = 0; c < channels_; ++c) {
      double sum = 0;
      for (int n = 0; n < num; ++n) {
        const float* p = x + (n * channels_ + c) * spatial;
        for (int i = 0; i < spatial; ++i) sum += p[i];
      }
      const float mean = static_cast<float>(sum / m);
      double sq = 0;
      for (int n = 0; n < num; ++n) {
        const float* p = x + (n * channels_ + c) * spatial;
        for (int i = 0; i < spatial; ++i) sq += (p[i] - mean) * (p[i] - mean);
      }
      mean_[c] = mean;
      var[c] = static_cast<float>(sq / m);
    }
    // Running sums: s <- fraction * s + statistic, factor <- fraction * factor + 1.
    const float f = moving_average_fraction_;
    float* factor = blobs_[2]->mutable_cpu_data();
    factor[0] = factor[0] * f + 1.f;
    axpby(channels_, 1.f, mean_.data(), f, blobs_[0]->mutable_cpu_data());
    const int per_channel = count / channels_;
    const float unbiased =
        per_channel > 1 ? static_cast<float>(per_channel) / (per_channel - 1) : 1.f;
    axpby(channels_, unbiased, var.data(), f, blobs_[1]->mutable_cpu_data());
  }
  for (int c = 0; c < channels_; ++c) std_[c] = std::sqrt(var[c] + eps_);

  float* y = top[0]->mutable_cpu_data();
  for (int n = 0; n < num; ++n) {
    for (int c = 0; c < channels_; ++c) {
      const int off = (n * channels_ + c) * spatial;
      const float mean = mean_[c], sd = std_[c];
      for (int i = 0; i < spatial; ++i) y[off + i] = (x[off + i] - mean) / sd;
    }
  }
  if (!use_global_stats_) copy(count, y, x_norm_.mutable_cpu_data());
}

// With batch statistics: dx = (dy - mean(dy) - mean(dy * y) * y) / std, means per channel.
// Each dx reads only its own dy once the sums are taken, so this also works in place.
void BatchNormLayer::Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                                  const Blobs& bottom) {
  if (!propagate_down[0]) return;
  const int num = bottom[0]->shape(0), count = bottom[0]->count();
  const int spatial = count / (num * channels_);
  const float* dy = top[0]->cpu_diff();
  float* dx = bottom[0]->mutable_cpu_diff();
  const float* y = use_global_stats_ ? nullptr : x_norm_.cpu_data();
  const double m = static_cast<double>(num) * spatial;
  for (int c = 0; c < channels_; ++c) {
    float mean_dy = 0, mean_dyy = 0;
    if (!use_global_stats_) {
      double sum = 0, sum_y = 0;
      for (int n = 0; n < num; ++n) {
        const int off = (n * channels_ + c) * spatial;
        for (int i = 0; i < spatial; ++i) {
          sum += dy[off + i];
          sum_y += dy[off + i] * y[off + i];
        }
      }
      mean_dy = static_cast<float>(sum / m);
      mean_dyy = static_cast<float>(sum_y / m);
    }
    const float sd = std_[c];
    for (int n = 0; n < num; ++n) {
      const int off = (n * channels_ + c) * spatial;
      if (use_global_stats_) {
        for (int i = 0; i < spatial; ++i) dx[off + i] = dy[off + i] / sd;
      } else {
        for (int i = 0; i < spatial; ++i)
          dx[off + i] = (dy[off + i] - mean_dy - mean_dyy * y[off + i]) / sd;
      }
    }
  }
}

HS_REGISTER_LAYER(BatchNorm, BatchNormLayer);

}  // namespace hogstream
