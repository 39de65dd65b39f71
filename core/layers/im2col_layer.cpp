// Im2col layer, CPU passes: the lowering helpers of core/math.hpp, image by image.
#include "core/layers/im2col_layer.hpp"

#include <climits>
#include <cstdint>

#include "core/math.hpp"

namespace hogstream {

void Im2colLayer::LayerSetUp(const Blobs& bottom, const Blobs& top) {
  SetUpGeometry(bottom, /*learned=*/false);
  use_dnnl_ = false;
}

void Im2colLayer::Reshape(const Blobs& bottom, const Blobs& top) {
  CheckBottoms(bottom);
  const Blob& x = *bottom[0];
  height_ = x.shape(2);
  width_ = x.shape(3);
  HS_REQUIRE(int64_t{height_} + 2 * int64_t{pad_h_} <= INT_MAX &&
             int64_t{width_} + 2 * int64_t{pad_w_} <= INT_MAX &&
             int64_t{dil_h_} * (kernel_h_ - 1) < INT_MAX && int64_t{dil_w_} * (kernel_w_ - 1) < INT_MAX)
      << "kernel, pad and dilation are too large";
  out_h_ = ConvOutSize(height_, kernel_h_, pad_h_, stride_h_, dil_h_);
  out_w_ = ConvOutSize(width_, kernel_w_, pad_w_, stride_w_, dil_w_);
  HS_REQUIRE(out_h_ > 0 && out_w_ > 0)
      << "kernel " << kernel_h_ << "x" << kernel_w_ << " does not fit the padded " << height_
      << "x" << width_ << " input";
  const int64_t rows = int64_t{channels_} * kernel_h_ * kernel_w_;
  HS_REQUIRE(rows <= INT_MAX) << "the lowering has too many rows (" << rows << ")";
  top[0]->Reshape({x.shape(0), static_cast<int>(rows), out_h_, out_w_});
}

void Im2colLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  const float* x = bottom[0]->cpu_data();
  float* y = top[0]->mutable_cpu_data();
  const int in_dim = bottom[0]->count(1), out_dim = top[0]->count(1);
  for (int n = 0; n < bottom[0]->shape(0); ++n)
    im2col(x + n * in_dim, channels_, height_, width_, kernel_h_, kernel_w_, pad_h_, pad_w_,
           stride_h_, stride_w_, dil_h_, dil_w_, y + n * out_dim);
}

void Im2colLayer::Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                               const Blobs& bottom) {
  if (!propagate_down[0]) return;
  const float* dy = top[0]->cpu_diff();
  float* dx = bottom[0]->mutable_cpu_diff();
  const int in_dim = bottom[0]->count(1), out_dim = top[0]->count(1);
  set(bottom[0]->count(), 0.f, dx);
  for (int n = 0; n < bottom[0]->shape(0); ++n)
    col2im(dy + n * out_dim, channels_, height_, width_, kernel_h_, kernel_w_, pad_h_, pad_w_,
           stride_h_, stride_w_, dil_h_, dil_w_, dx + n * in_dim);
}

HS_REGISTER_LAYER(Im2col, Im2colLayer);

}  // namespace hogstream
