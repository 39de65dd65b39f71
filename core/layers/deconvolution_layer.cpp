// Deconvolution, CPU passes. Per image and group (C = input channels, K = num_output):
//   forward:  col = W_g^T x_g   ((K/g)·kh·kw × H·W), folded (col2im) onto the K×H'×W' output;
//   backward: dcol = im2col(dy); dW_g += x_g dcol_g^T; dx_g = W_g dcol_g; db = Σ dy.
// The output image plays the part a convolution's input does, so the lowering helpers of
// core/math.hpp serve with the output's geometry (its "convolution output" is our input).
#include "core/layers/deconvolution_layer.hpp"

#include <climits>
#include <cstdint>

#include "core/math.hpp"

namespace hogstream {

void DeconvolutionLayer::LayerSetUp(const Blobs& bottom, const Blobs& top) {
  SetUpGeometry(bottom);
  use_dnnl_ = false;
  MakeBlobs({channels_, num_output_ / group_, kernel_h_, kernel_w_});
}

void DeconvolutionLayer::Reshape(const Blobs& bottom, const Blobs& top) {
  CheckBottoms(bottom);
  const Blob& b0 = *bottom[0];
  out_h_ = b0.shape(2);  // the lowering's spatial extent: our input
  out_w_ = b0.shape(3);
  // The output's extent, in 64 bits (a large stride or kernel must not wrap).
  auto extent = [](int in, int kernel, int pad, int stride, int dil) {
    return int64_t{stride} * (in - 1) + int64_t{dil} * (kernel - 1) + 1 - 2 * int64_t{pad};
  };
  const int64_t h = extent(out_h_, kernel_h_, pad_h_, stride_h_, dil_h_);
  const int64_t w = extent(out_w_, kernel_w_, pad_w_, stride_w_, dil_w_);
  HS_REQUIRE(h > 0 && w > 0 && h <= INT_MAX && w <= INT_MAX)
      << "kernel " << kernel_h_ << "x" << kernel_w_ << ", stride " << stride_h_ << "x"
      << stride_w_ << " and pad " << pad_h_ << "x" << pad_w_ << " give an output of " << h << "x"
      << w << " from a " << out_h_ << "x" << out_w_ << " input";
  height_ = static_cast<int>(h);
  width_ = static_cast<int>(w);
  for (Blob* t : top) t->Reshape({b0.shape(0), num_output_, height_, width_});
  if (!is_1x1_) col_.resize(static_cast<size_t>(num_output_) * kernel_h_ * kernel_w_ * out_h_ * out_w_);
}

void DeconvolutionLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  const float* w = blobs_[0]->cpu_data();
  const int in_spatial = out_h_ * out_w_, out_spatial = height_ * width_;
  const int cg = channels_ / group_;                          // input channels per group
  const int kk = num_output_ / group_ * kernel_h_ * kernel_w_;  // lowered rows per group
  const int in_dim = channels_ * in_spatial, out_dim = num_output_ * out_spatial;
  for (size_t b = 0; b < bottom.size(); ++b) {
    const float* x = bottom[b]->cpu_data();
    float* y = top[b]->mutable_cpu_data();
    for (int n = 0; n < bottom[b]->shape(0); ++n) {
      const float* xn = x + n * in_dim;
      float* yn = y + n * out_dim;
      float* col = is_1x1_ ? yn : col_.data();
      for (int g = 0; g < group_; ++g)
        gemm(Trans::Yes, Trans::No, kk, in_spatial, cg, 1.f, w + g * cg * kk,
             xn + g * cg * in_spatial, 0.f, col + g * kk * in_spatial);
      if (!is_1x1_) {
        set(out_dim, 0.f, yn);
        col2im(col, num_output_, height_, width_, kernel_h_, kernel_w_, pad_h_, pad_w_,
               stride_h_, stride_w_, dil_h_, dil_w_, yn);
      }
      if (bias_term_) AddBias(yn, out_spatial);
    }
  }
}

void DeconvolutionLayer::Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                                      const Blobs& bottom) {
  const float* w = blobs_[0]->cpu_data();
  const int in_spatial = out_h_ * out_w_, out_spatial = height_ * width_;
  const int cg = channels_ / group_;
  const int kk = num_output_ / group_ * kernel_h_ * kernel_w_;
  const int in_dim = channels_ * in_spatial, out_dim = num_output_ * out_spatial;
  const bool want_w = param_propagate_down(0);
  const bool want_b = bias_term_ && param_propagate_down(1);
  float* dw = want_w ? blobs_[0]->mutable_cpu_diff() : nullptr;
  float* db = want_b ? blobs_[1]->mutable_cpu_diff() : nullptr;
  for (size_t b = 0; b < top.size(); ++b) {
    const float* dy = top[b]->cpu_diff();
    const float* x = bottom[b]->cpu_data();
    const int num = top[b]->shape(0);
    if (want_b) AccumulateBiasGradient(dy, num, out_spatial, db);
    if (!want_w && !propagate_down[b]) continue;
    float* dx = propagate_down[b] ? bottom[b]->mutable_cpu_diff() : nullptr;
    for (int n = 0; n < num; ++n) {
      const float* dyn = dy + n * out_dim;
      const float* dcol = dyn;
      if (!is_1x1_) {
        im2col(dyn, num_output_, height_, width_, kernel_h_, kernel_w_, pad_h_, pad_w_, stride_h_,
               stride_w_, dil_h_, dil_w_, col_.data());
        dcol = col_.data();
      }
      for (int g = 0; g < group_; ++g) {
        if (want_w)
          gemm(Trans::No, Trans::Yes, cg, kk, in_spatial, 1.f, x + n * in_dim + g * cg * in_spatial,
               dcol + g * kk * in_spatial, 1.f, dw + g * cg * kk);
        if (dx)
          gemm(Trans::No, Trans::No, cg, in_spatial, kk, 1.f, w + g * cg * kk,
               dcol + g * kk * in_spatial, 0.f, dx + n * in_dim + g * cg * in_spatial);
      }
    }
  }
}

HS_REGISTER_LAYER(Deconvolution, DeconvolutionLayer);

}  // namespace hogstream
