#include "core/layers/lrn_layer.hpp"

#include <algorithm>
#include <cmath>

#include "core/math.hpp"

namespace hogstream {

void LRNLayer::LayerSetUp(const Blobs& bottom, const Blobs& top) {
  const pb::LRNParameter& p = param_.lrn_param();
  size_ = static_cast<int>(p.local_size());
  HS_REQUIRE(size_ % 2 == 1) << "local_size must be odd, got " << size_;
  half_ = (size_ - 1) / 2;
  alpha_ = p.alpha();
  beta_ = p.beta();
  k_ = p.k();
  across_ = p.norm_region() == pb::LRNParameter::ACROSS_CHANNELS;
}

void LRNLayer::Reshape(const Blobs& bottom, const Blobs& top) {
  HS_REQUIRE(bottom[0]->num_axes() == 4)
      << "input must be 4-d (num, channels, height, width), got " << bottom[0]->shape_string();
  channels_ = bottom[0]->channels();
  height_ = bottom[0]->height();
  width_ = bottom[0]->width();
  top[0]->ReshapeLike(*bottom[0]);
  scale_.ReshapeLike(*bottom[0]);
  const int plane = height_ * width_;
  work_.resize(across_ ? (channels_ + 1) * plane : 2 * plane);
}

namespace {
// out = in * s^-beta over n values. std::pow is a scalar library call per value (most of the
// layer's time); for the betas in use it is a few vector square roots and a division: s^-0.75
// = 1 / (sqrt(s) sqrt(sqrt(s))) (AlexNet, GoogLeNet, Inception), s^-0.5, s^-1 (within 2 ulp of
// pow; the same infinities and NaNs for s = 0 and s < 0). Other betas keep std::pow.
enum class Power { kThreeQuarters, kHalf, kOne, kAny };

Power PowerOf(float beta) {
  if (beta == 0.75f) return Power::kThreeQuarters;
  if (beta == 0.5f) return Power::kHalf;
  if (beta == 1.f) return Power::kOne;
  return Power::kAny;
}

template <Power P>
void TimesPowerT(int n, const float* in, const float* s, float beta,
                 float* out) {
  for (int i = 0; i < n; ++i) {
    float p;
    if (P == Power::kThreeQuarters) {
      const float r = std::sqrt(s[i]);
      p = 1.f / (r * std::sqrt(r));
    } else if (P == Power::kHalf) {
      p = 1.f / std::sqrt(s[i]);
    } else if (P == Power::kOne) {
      p = 1.f / s[i];
    } else {
      p = std::pow(s[i], -beta);
    }
    out[i] = in[i] * p;
  }
}

void TimesPower(int n, const float* in, const float* s, float beta, float* out) {
  switch (PowerOf(beta)) {
    case Power::kThreeQuarters: return TimesPowerT<Power::kThreeQuarters>(n, in, s, beta, out);
    case Power::kHalf: return TimesPowerT<Power::kHalf>(n, in, s, beta, out);
    case Power::kOne: return TimesPowerT<Power::kOne>(n, in, s, beta, out);
    case Power::kAny: return TimesPowerT<Power::kAny>(n, in, s, beta, out);
  }
}
}  // namespace

void LRNLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  const float* x = bottom[0]->cpu_data();
  float* s = scale_.mutable_cpu_data();
  const int image = channels_ * height_ * width_, plane = height_ * width_;
  for (int n = 0; n < bottom[0]->num(); ++n) {
    if (across_) {
      ForwardAcross(x + n * image, s + n * image);
    } else {
      for (int c = 0; c < channels_; ++c) {
        const int off = n * image + c * plane;
        ForwardWithin(x + off, s + off);
      }
    }
  }
  TimesPower(bottom[0]->count(), x, s, beta_, top[0]->mutable_cpu_data());
}

// One image: s for channel c is s for channel c - 1 plus the square entering the window and
// minus the one leaving it.
void LRNLayer::ForwardAcross(const float* x, float* s) const {
  const int plane = height_ * width_;
  const float a = alpha_ / size_;
  set(plane, k_, s);
  for (int c = 0; c <= std::min(half_, channels_ - 1); ++c) {
    const float* xc = x + c * plane;
    for (int i = 0; i < plane; ++i) s[i] += a * (xc[i] * xc[i]);
  }
  for (int c = 1; c < channels_; ++c) {
    float* sc = s + c * plane;
    copy(plane, sc - plane, sc);
    if (c + half_ < channels_) {
      const float* in = x + (c + half_) * plane;
      for (int i = 0; i < plane; ++i) sc[i] += a * (in[i] * in[i]);
    }
    if (c - half_ - 1 >= 0) {
      const float* out = x + (c - half_ - 1) * plane;
      for (int i = 0; i < plane; ++i) sc[i] -= a * (out[i] * out[i]);
    }
  }
}

// One plane: s = 1 + alpha * (window sum of x^2) / (size * size).
void LRNLayer::ForwardWithin(const float* x, float* s) {
  const int plane = height_ * width_;
  float* sq = work_.data();
  float* sum = sq + plane;
  vsqr(plane, x, sq);
  WindowSum(sq, sum);
  const float area = static_cast<float>(size_ * size_);
  for (int i = 0; i < plane; ++i) s[i] = alpha_ * (sum[i] / area) + 1.f;
}

// Each (kh, kw) offset is one shifted, clipped row add, so every window is summed in
// row-major order.
void LRNLayer::WindowSum(const float* in, float* out) const {
  set(height_ * width_, 0.f, out);
  for (int h = 0; h < height_; ++h) {
    float* o = out + h * width_;
    for (int r = std::max(h - half_, 0); r <= std::min(h + half_, height_ - 1); ++r) {
      const float* row = in + r * width_;
      for (int off = -half_; off <= half_; ++off) {
        const int lo = std::max(0, -off), hi = std::min(width_, width_ - off);
        for (int w = lo; w < hi; ++w) o[w] += row[w + off];
      }
    }
  }
}

void LRNLayer::Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                            const Blobs& bottom) {
  if (!propagate_down[0]) return;
  const float* x = bottom[0]->cpu_data();
  const float* y = top[0]->cpu_data();
  const float* dy = top[0]->cpu_diff();
  const float* s = scale_.cpu_data();
  float* dx = bottom[0]->mutable_cpu_diff();
  TimesPower(bottom[0]->count(), dy, s, beta_, dx);
  const int image = channels_ * height_ * width_, plane = height_ * width_;
  for (int n = 0; n < bottom[0]->num(); ++n) {
    if (across_) {
      const int off = n * image;
      BackwardAcross(x + off, y + off, s + off, dy + off, dx + off);
    } else {
      for (int c = 0; c < channels_; ++c) {
        const int off = n * image + c * plane;
        BackwardWithin(x + off, y + off, s + off, dy + off, dx + off);
      }
    }
  }
}

// d s_j / d x_i = 2 alpha / size * x_i for every j whose window holds i, and the windows are
// symmetric, so dx_i -= 2 alpha beta / size * x_i * (sum over i's window of dy y / s).
void LRNLayer::BackwardAcross(const float* x, const float* y, const float* s, const float* dy,
                              float* dx) {
  const int plane = height_ * width_;
  float* ratio = work_.data();
  float* acc = ratio + channels_ * plane;
  for (int i = 0; i < channels_ * plane; ++i) ratio[i] = dy[i] * y[i] / s[i];
  set(plane, 0.f, acc);
  for (int c = 0; c < std::min(half_, channels_); ++c) axpy(plane, 1.f, ratio + c * plane, acc);
  const float coef = 2.f * alpha_ * beta_ / size_;
  for (int c = 0; c < channels_; ++c) {
    if (c + half_ < channels_) axpy(plane, 1.f, ratio + (c + half_) * plane, acc);
    const float* xc = x + c * plane;
    float* dxc = dx + c * plane;
    for (int i = 0; i < plane; ++i) dxc[i] -= coef * (acc[i] * xc[i]);
    if (c - half_ >= 0) axpy(plane, -1.f, ratio + (c - half_) * plane, acc);
  }
}

// The same within one plane, with the size x size window and divisor size * size.
void LRNLayer::BackwardWithin(const float* x, const float* y, const float* s, const float* dy,
                              float* dx) {
  const int plane = height_ * width_;
  float* ratio = work_.data();
  float* sum = ratio + plane;
  for (int i = 0; i < plane; ++i) ratio[i] = dy[i] * y[i] / s[i];
  WindowSum(ratio, sum);
  const float coef = 2.f * alpha_ * beta_ / static_cast<float>(size_ * size_);
  for (int i = 0; i < plane; ++i) dx[i] -= coef * (sum[i] * x[i]);
}

HS_REGISTER_LAYER(LRN, LRNLayer);

}  // namespace hogstream
