// Im2col: each image lowered into the columns a convolution multiplies (convolution_param's
// kernel, pad, stride and dilation; num_output and group are not used): top is
// (N, C * kernel_h * kernel_w, out_h, out_w), row c * kh * kw + i * kw + j holding input
// channel c at kernel offset (i, j) for every output position. Backward folds the columns'
// gradients back onto the image (col2im).
#pragma once

#include <vector>

#include "core/layers/convolution_layer.hpp"

namespace hogstream {

class Im2colLayer : public ConvolutionLayer {
 public:
  using ConvolutionLayer::ConvolutionLayer;
  const char* type() const override { return "Im2col"; }
  int ExactNumBottomBlobs() const override { return 1; }
  int ExactNumTopBlobs() const override { return 1; }
  void LayerSetUp(const Blobs& bottom, const Blobs& top) override;
  void Reshape(const Blobs& bottom, const Blobs& top) override;
  Layouts LayoutSupport() const override { return Layouts::kPlain; }

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;
};

}  // namespace hogstream
