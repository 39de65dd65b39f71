// Pooling: MAX or AVE over 2-d windows of an N x C x H x W input, with Caffe's output size
// (CEIL rounding by default, and the last window never starting inside the padding) and
// Caffe's AVE divisor (the window clipped to the padded input, not to the input). MAX may
// output its argmax (index within the H x W plane, as float) as a second top.
#pragma once

#include <vector>

#include "core/layer.hpp"

namespace hogstream {

class PoolingLayer : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "Pooling"; }
  int ExactNumBottomBlobs() const override { return 1; }
  int MinTopBlobs() const override { return 1; }
  int MaxTopBlobs() const override {
    return param_.pooling_param().pool() == pb::PoolingParameter::MAX ? 2 : 1;
  }
  void LayerSetUp(const Blobs& bottom, const Blobs& top) override;
  void Reshape(const Blobs& bottom, const Blobs& top) override;

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;

 private:
  // Rows [begin, end) of the input that output row `ph` reads; for AVE also the divisor's
  // row extent (clipped to H + pad rather than H).
  void RowWindow(int ph, int* begin, int* end, int* ave_rows) const;
  // One output row from input rows [h0, h1) of one plane: max (and argmax) or sum.
  void MaxRow(const float* in, int h0, int h1, float* out, int* mask) const;
  void SumRow(const float* in, int h0, int h1, float* out) const;

  bool max_ = true;
  bool global_ = false;
  int kernel_h_ = 0, kernel_w_ = 0, stride_h_ = 1, stride_w_ = 1, pad_h_ = 0, pad_w_ = 0;
  int height_ = 0, width_ = 0, pooled_h_ = 0, pooled_w_ = 0;
  // For each kernel column kw, the outputs [kw_lo_, kw_hi_) whose window column
  // pw * stride_w - pad_w + kw lies inside the input.
  std::vector<int> kw_lo_, kw_hi_;
  std::vector<int> ave_cols_;  // AVE: divisor's column extent for each output column
  std::vector<float> row_;     // AVE backward: one output row of scaled gradients
  std::vector<int> mask_;      // MAX: argmax within the input plane, -1 for none
};

}  // namespace hogstream
