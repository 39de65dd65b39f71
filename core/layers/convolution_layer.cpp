#include "core/layers/convolution_layer.hpp"

#include <climits>
#include <cstdint>

#include "core/filler.hpp"
#include "core/math.hpp"

namespace hogstream {

namespace {
// Reads a repeated spatial setting (one value for both axes, or one per axis) or its _h/_w
// spelling; `fallback` when none is given.
// A uint32 setting as an int: above INT_MAX it would wrap negative (4294967295 is -1, what a
// tool writing "-1" unsigned produces) and reach oneDNN as a raw descriptor error.
int AsInt(uint32_t v, const char* what) {
  HS_REQUIRE(v <= static_cast<uint32_t>(INT_MAX))
      << what << " " << v << " is out of range (a negative value written as unsigned?)";
  return static_cast<int>(v);
}

void SpatialPair(const google::protobuf::RepeatedField<uint32_t>& values, bool has_hw,
                 uint32_t h, uint32_t w, int fallback, const char* what, int* out_h, int* out_w) {
  if (has_hw) {
    HS_REQUIRE(values.empty()) << "give either " << what << " or " << what << "_h/_w, not both";
    *out_h = AsInt(h, what);
    *out_w = AsInt(w, what);
    return;
  }
  switch (values.size()) {
    case 0: *out_h = *out_w = fallback; break;
    case 1: *out_h = *out_w = AsInt(values[0], what); break;
    case 2:
      *out_h = AsInt(values[0], what);
      *out_w = AsInt(values[1], what);
      break;
    default: HS_FAIL() << what << " has " << values.size() << " values; 2-d convolution takes 1 or 2";
  }
}
}  // namespace

void ConvolutionLayer::SetUpGeometry(const Blobs& bottom, bool learned) {
  const auto& cp = param_.convolution_param();
  HS_REQUIRE(cp.axis() == 1) << "only axis 1 (channels) is supported, got axis " << cp.axis();
  HS_REQUIRE(!cp.force_nd_im2col()) << "force_nd_im2col is not supported";
  HS_REQUIRE(bottom[0]->num_axes() == 4)
      << "needs a 4-d (N, C, H, W) input, got shape " << bottom[0]->shape_string()
      << " (only 2-d convolution is supported)";
  if (learned) {
    HS_REQUIRE(cp.has_num_output() && cp.num_output() > 0) << "num_output must be > 0";
  }
  SpatialPair(cp.kernel_size(), cp.has_kernel_h() || cp.has_kernel_w(), cp.kernel_h(),
              cp.kernel_w(), 0, "kernel_size", &kernel_h_, &kernel_w_);
  HS_REQUIRE(kernel_h_ > 0 && kernel_w_ > 0) << "kernel size must be > 0";
  SpatialPair(cp.pad(), cp.has_pad_h() || cp.has_pad_w(), cp.pad_h(), cp.pad_w(), 0, "pad",
              &pad_h_, &pad_w_);
  SpatialPair(cp.stride(), cp.has_stride_h() || cp.has_stride_w(), cp.stride_h(), cp.stride_w(),
              1, "stride", &stride_h_, &stride_w_);
  HS_REQUIRE(stride_h_ > 0 && stride_w_ > 0) << "stride must be > 0";
  switch (cp.dilation_size()) {
    case 0: dil_h_ = dil_w_ = 1; break;
    case 1: dil_h_ = dil_w_ = AsInt(cp.dilation(0), "dilation"); break;
    case 2:
      dil_h_ = AsInt(cp.dilation(0), "dilation");
      dil_w_ = AsInt(cp.dilation(1), "dilation");
      break;
    default: HS_FAIL() << "dilation has " << cp.dilation_size() << " values; expected 1 or 2";
  }
  HS_REQUIRE(dil_h_ > 0 && dil_w_ > 0) << "dilation must be > 0";
  is_1x1_ = kernel_h_ == 1 && kernel_w_ == 1 && stride_h_ == 1 && stride_w_ == 1 &&
            pad_h_ == 0 && pad_w_ == 0;

  channels_ = bottom[0]->shape(1);
  blobs_count_ = static_cast<int>(bottom.size());
  if (!learned) return;
  num_output_ = static_cast<int>(cp.num_output());
  group_ = static_cast<int>(cp.group());
  HS_REQUIRE(group_ > 0 && channels_ % group_ == 0 && num_output_ % group_ == 0)
      << "group " << group_ << " must divide both the input channels (" << channels_
      << ") and num_output (" << num_output_ << ")";
  bias_term_ = cp.bias_term();
}

void ConvolutionLayer::LayerSetUp(const Blobs& bottom, const Blobs& top) {
  SetUpGeometry(bottom);
  const auto& cp = param_.convolution_param();
  // oneDNN's kernels work on channel blocks of 16; other channel counts are padded up to a
  // block, which made them slower than the lowering on LeNet's conv2 (20 channels: 6.2 vs
  // 5.2 ms per batch). First layers (<= 4 channels) have their own plain-layout kernels.
  const int cin = channels_ / group_;
  use_dnnl_ = cp.engine() != pb::CAFFE && (cin <= 4 || cin % 16 == 0);

  MakeBlobs({num_output_, channels_ / group_, kernel_h_, kernel_w_});
}

void ConvolutionLayer::MakeBlobs(const std::vector<int>& weight_shape) {
  const auto& cp = param_.convolution_param();
  if (blobs_.empty()) {
    blobs_.push_back(std::make_shared<Blob>(weight_shape));
    Fill(cp.weight_filler(), blobs_[0].get());
    if (bias_term_) {
      blobs_.push_back(std::make_shared<Blob>(std::vector<int>{num_output_}));
      Fill(cp.bias_filler(), blobs_[1].get());
    }
  }
  param_propagate_down_.assign(blobs_.size(), true);
}

void ConvolutionLayer::CheckBottoms(const Blobs& bottom) const {
  const Blob& b0 = *bottom[0];
  HS_REQUIRE(b0.num_axes() == 4 && b0.shape(1) == channels_)
      << "input shape " << b0.shape_string() << " does not match the layer's " << channels_
      << " channels";
  for (size_t i = 1; i < bottom.size(); ++i)
    HS_REQUIRE(bottom[i]->shape() == b0.shape())
        << "all inputs must have one shape; got " << b0.shape_string() << " and "
        << bottom[i]->shape_string();
}

void ConvolutionLayer::Reshape(const Blobs& bottom, const Blobs& top) {
  CheckBottoms(bottom);
  const Blob& b0 = *bottom[0];
  height_ = b0.shape(2);
  width_ = b0.shape(3);
  // In 64 bits: a padded extent or a dilated kernel beyond int would overflow ConvOutSize.
  auto fits = [](int size, int kernel, int pad, int dil) {
    return int64_t{size} + 2 * int64_t{pad} <= INT_MAX &&
           int64_t{dil} * (kernel - 1) + 1 <= INT_MAX;
  };
  HS_REQUIRE(fits(height_, kernel_h_, pad_h_, dil_h_) && fits(width_, kernel_w_, pad_w_, dil_w_))
      << "kernel " << kernel_h_ << "x" << kernel_w_ << ", pad " << pad_h_ << "x" << pad_w_
      << " and dilation " << dil_h_ << "x" << dil_w_ << " are too large";
  out_h_ = ConvOutSize(height_, kernel_h_, pad_h_, stride_h_, dil_h_);
  out_w_ = ConvOutSize(width_, kernel_w_, pad_w_, stride_w_, dil_w_);
  HS_REQUIRE(out_h_ > 0 && out_w_ > 0)
      << "kernel " << kernel_h_ << "x" << kernel_w_ << " does not fit the padded "
      << height_ << "x" << width_ << " input";
  for (Blob* t : top) t->Reshape({b0.shape(0), num_output_, out_h_, out_w_});
  if (!host_passes_) {
    return;
  } else if (use_dnnl_) {
    PrepareDnnl(b0);
  } else if (!is_1x1_) {
    col_.resize(static_cast<size_t>(channels_) * kernel_h_ * kernel_w_ * out_h_ * out_w_);
  }
}

void ConvolutionLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  HS_CHECK(host_passes_) << "the GPU convolution '" << param_.name() << "' was run in CPU mode";
  if (use_dnnl_) ForwardDnnl(bottom, top);
  else ForwardLowered(bottom, top);
}

void ConvolutionLayer::Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                                    const Blobs& bottom) {
  HS_CHECK(host_passes_) << "the GPU convolution '" << param_.name() << "' was run in CPU mode";
  if (use_dnnl_) BackwardDnnl(top, propagate_down, bottom);
  else BackwardLowered(top, propagate_down, bottom);
}

void ConvolutionLayer::AddBias(float* y, int spatial) const {
  const float* bias = blobs_[1]->cpu_data();
  for (int c = 0; c < num_output_; ++c) {
    float* row = y + static_cast<size_t>(c) * spatial;
    const float v = bias[c];
    for (int i = 0; i < spatial; ++i) row[i] += v;
  }
}

void ConvolutionLayer::AccumulateBiasGradient(const float* dy, int num, int spatial, float* db) const {
  for (int n = 0; n < num; ++n)
    for (int c = 0; c < num_output_; ++c) {
      const float* row = dy + (static_cast<size_t>(n) * num_output_ + c) * spatial;
      float s = 0;
      for (int i = 0; i < spatial; ++i) s += row[i];
      db[c] += s;
    }
}

const float* ConvolutionLayer::Lower(const float* im) {
  if (is_1x1_) return im;
  im2col(im, channels_, height_, width_, kernel_h_, kernel_w_, pad_h_, pad_w_, stride_h_,
         stride_w_, dil_h_, dil_w_, col_.data());
  return col_.data();
}

void ConvolutionLayer::ForwardLowered(const Blobs& bottom, const Blobs& top) {
  const float* w = blobs_[0]->cpu_data();
  const int out_spatial = out_h_ * out_w_;
  const int m = num_output_ / group_;                        // output channels per group
  const int k = channels_ / group_ * kernel_h_ * kernel_w_;  // lowered rows per group
  const int in_dim = channels_ * height_ * width_, out_dim = num_output_ * out_spatial;
  for (size_t b = 0; b < bottom.size(); ++b) {
    const float* x = bottom[b]->cpu_data();
    float* y = top[b]->mutable_cpu_data();
    for (int n = 0; n < bottom[b]->shape(0); ++n) {
      const float* col = Lower(x + n * in_dim);
      float* yn = y + n * out_dim;
      for (int g = 0; g < group_; ++g)
        gemm(Trans::No, Trans::No, m, out_spatial, k, 1.f, w + g * m * k,
             col + g * k * out_spatial, 0.f, yn + g * m * out_spatial);
      if (bias_term_) AddBias(yn, out_spatial);
    }
  }
}

void ConvolutionLayer::BackwardLowered(const Blobs& top, const std::vector<bool>& propagate_down,
                                       const Blobs& bottom) {
  const float* w = blobs_[0]->cpu_data();
  const int out_spatial = out_h_ * out_w_;
  const int m = num_output_ / group_;
  const int k = channels_ / group_ * kernel_h_ * kernel_w_;
  const int in_dim = channels_ * height_ * width_, out_dim = num_output_ * out_spatial;
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
      if (want_w) {
        // dW += dY * col^T, per group.
        // Measured (bench/kernels_bench.cpp): for narrow lowerings (C*kh*kw < 256, e.g. the
        // first layer) dY * col^T runs at ~40 GFLOP/s and im2row + dY * row at ~150; for wide
        // ones im2col + dY * col^T wins.
        const float* xn = x + n * in_dim;
        if (is_1x1_ || k * group_ >= 256) {
          const float* col = Lower(xn);
          for (int g = 0; g < group_; ++g)
            gemm(Trans::No, Trans::Yes, m, k, out_spatial, 1.f, dyn + g * m * out_spatial,
                 col + g * k * out_spatial, 1.f, dw + g * m * k);
        } else {
          im2row(xn, channels_, height_, width_, kernel_h_, kernel_w_, pad_h_, pad_w_, stride_h_,
                 stride_w_, dil_h_, dil_w_, col_.data());
          const int row_len = group_ * k;
          for (int g = 0; g < group_; ++g)
            gemm(Trans::No, Trans::No, m, k, out_spatial, 1.f, dyn + g * m * out_spatial,
                 out_spatial, col_.data() + g * k, row_len, 1.f, dw + g * m * k, k);
        }
      }
      if (dx) {
        // dcol = W^T * dY, then fold the columns back onto the image.
        float* dxn = dx + n * in_dim;
        float* dcol = is_1x1_ ? dxn : col_.data();
        for (int g = 0; g < group_; ++g)
          gemm(Trans::Yes, Trans::No, k, out_spatial, m, 1.f, w + g * m * k,
               dyn + g * m * out_spatial, 0.f, dcol + g * k * out_spatial);
        if (!is_1x1_) {
          set(in_dim, 0.f, dxn);
          col2im(dcol, channels_, height_, width_, kernel_h_, kernel_w_, pad_h_, pad_w_,
                 stride_h_, stride_w_, dil_h_, dil_w_, dxn);
        }
      }
    }
  }
}

HS_REGISTER_LAYER(Convolution, ConvolutionLayer);

}  // namespace hogstream
