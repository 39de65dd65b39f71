// Convolution over 2-d images, Caffe's semantics: pad, stride, dilation, group, bias_term,
// weights shaped (num_output, channels / group, kernel_h, kernel_w).
//
// Two engines compute the same thing:
//  * DEFAULT: oneDNN's direct convolution kernels (JIT, blocked layouts; our NCHW tensors are
//    reordered in and out) where the input channels fit its blocks (<= 4, or a multiple of
//    16); measured 1.6-2x faster than the lowering below on the cifar10 shapes. Other
//    channel counts use the lowering. 3x3 stride-1 layers with >= 32 channels in and out take
//    its Winograd kernels instead, where the CPU has them (see convolution_dnnl.cpp).
//  * CAFFE (`engine: CAFFE`): each image is lowered with im2col and multiplied by the weights
//    in one GEMM per group; 1x1 kernels with unit stride and no padding skip the lowering.
// Parameter gradients accumulate in both, so a Net can sum them over iter_size passes.
#pragma once

#include <memory>
#include <vector>

#include "core/layer.hpp"

namespace hogstream {

class ConvolutionLayer : public Layer {
 public:
  explicit ConvolutionLayer(const pb::LayerParameter& param);
  const char* type() const override { return "Convolution"; }
  int MinBottomBlobs() const override { return 1; }
  int MinTopBlobs() const override { return 1; }
  bool EqualNumBottomTopBlobs() const override { return true; }
  ~ConvolutionLayer() override;
  void LayerSetUp(const Blobs& bottom, const Blobs& top) override;
  // Whether oneDNN's Winograd kernels serve this layer (set by Reshape; for tests).
  bool winograd() const { return winograd_; }
  void Reshape(const Blobs& bottom, const Blobs& top) override;
  // oneDNN's kernels take either layout of the input and output as they are (one bottom).
  Layouts LayoutSupport() const override {
    return use_dnnl_ && blobs_count_ == 1 ? Layouts::kEach : Layouts::kPlain;
  }
  void SetBlocked(const std::vector<bool>& bottom, const std::vector<bool>& top) override;

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;


 // Protected for the GPU twins (core/layers/*.cu) and Deconvolution, which derive from this
 // class.
 protected:
  // Reads convolution_param (kernel, pad, stride, dilation; with `learned`, also num_output,
  // group and bias_term) and the input's channels; every setting a user can get wrong is one
  // line.
  void SetUpGeometry(const Blobs& bottom, bool learned = true);
  // The bias (blobs_[1]) of one image: y[c][i] += bias[c] over `spatial` values per output
  // channel; and its gradient: db[c] += the sums of dy's channel planes over `num` images.
  void AddBias(float* y, int spatial) const;
  // Creates and fills the weights (of `weight_shape`) and the bias unless a model gave them.
  void MakeBlobs(const std::vector<int>& weight_shape);
  // Every bottom is N x channels_ x H x W, all of one shape (one line naming what differs).
  void CheckBottoms(const Blobs& bottom) const;
  void AccumulateBiasGradient(const float* dy, int num, int spatial, float* db) const;
  // Lowers image `im` into col_ (or returns `im` itself when no lowering is needed).
  const float* Lower(const float* im);
  void ForwardLowered(const Blobs& bottom, const Blobs& top);
  void BackwardLowered(const Blobs& top, const std::vector<bool>& propagate_down,
                       const Blobs& bottom);

  // oneDNN engine (convolution_dnnl.cpp): primitives built for the current input shape.
  void PrepareDnnl(const Blob& bottom);
  void ForwardDnnl(const Blobs& bottom, const Blobs& top);
  void BackwardDnnl(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom);
  struct Dnnl;
  std::unique_ptr<Dnnl> dnnl_;
  bool use_dnnl_ = true;
  bool host_passes_ = true;  // false: a GPU twin that never runs the CPU passes (no buffers for them)
  int blobs_count_ = 0;  // bottoms (= tops)
  bool blocked_bottom_ = false, blocked_top_ = false;
  bool winograd_ = false;

  int num_output_ = 0, group_ = 1;
  int kernel_h_ = 0, kernel_w_ = 0, pad_h_ = 0, pad_w_ = 0;
  int stride_h_ = 1, stride_w_ = 1, dil_h_ = 1, dil_w_ = 1;
  bool bias_term_ = true, is_1x1_ = false;
  int channels_ = 0, height_ = 0, width_ = 0, out_h_ = 0, out_w_ = 0;
  std::vector<float> col_;
};

}  // namespace hogstream
