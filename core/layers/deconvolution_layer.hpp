// Deconvolution (a transposed convolution), Caffe's semantics: the forward pass is a
// convolution's backward pass with respect to its input, so the output grows by the stride:
// out = stride * (in - 1) + dilation * (kernel - 1) + 1 - 2 * pad. Weights are shaped
// (channels, num_output / group, kernel_h, kernel_w) (input channels first, as Caffe stores
// them), settings come from convolution_param with the same defaults. Used for learned
// upsampling (FCN) and, with a bilinear filler and lr_mult 0, for fixed interpolation.
// CPU passes by lowering: W^T x per group, then the columns folded onto the output image.
#pragma once

#include <vector>

#include "core/layers/convolution_layer.hpp"

namespace hogstream {

class DeconvolutionLayer : public ConvolutionLayer {
 public:
  using ConvolutionLayer::ConvolutionLayer;
  const char* type() const override { return "Deconvolution"; }
  void LayerSetUp(const Blobs& bottom, const Blobs& top) override;
  void Reshape(const Blobs& bottom, const Blobs& top) override;
  Layouts LayoutSupport() const override { return Layouts::kPlain; }

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;
};

}  // namespace hogstream
