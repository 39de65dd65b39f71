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
  // Either layout on each side (pooling_blocked.cpp), but with the argmax top: NCHW only.
  Layouts LayoutSupport() const override { return tops_ == 1 ? Layouts::kEach : Layouts::kPlain; }
  bool BlockedOutNeedsBlockedIn() const override { return true; }
  void SetBlocked(const std::vector<bool>& bottom, const std::vector<bool>& top) override;

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;


 // Protected for the GPU twins (core/layers/*.cu), which derive from this class.
 protected:
  // Rows [begin, end) of the input that output row `ph` reads; for AVE also the divisor's
  // row extent (clipped to H + pad rather than H).
  void RowWindow(int ph, int* begin, int* end, int* ave_rows) const;
  // The plane-wise forward (see pooling_layer.cpp): copies one input plane's rows into the
  // padded row phases, pools them as one flat vector loop and compacts the result into `out`
  // (and the plane's mask for MAX).
  void SplitPhases(const float* in);
  void PoolPlane(const float* in, float* out, int* mask);
  // AVE backward of one plane through the phases (see pooling_layer.cpp).
  void AveBackPlane(const float* dy, float* dx);
  // Kernel == input and no padding: one output per plane, 16 planes at a time.
  void GlobalForward(int planes, const float* in, float* out, int* mask) const;
  // Either side channel-blocked: direct window loops over 16 channels at a time.
  template <bool InBlocked, bool OutBlocked>
  void ForwardBlocked(const float* in, float* out, int num, int channels);
  template <bool InBlocked, bool OutBlocked>
  void BackwardBlocked(const float* dy, float* dx, int num, int channels);
  // Input columns [begin, end) output column `pw` reads, and the AVE divisor's extent.
  void ColWindow(int pw, int* begin, int* end, int* ave_cols) const;

  int tops_ = 1;
  bool blocked_in_ = false, blocked_out_ = false;

  bool max_ = true;
  bool global_ = false;
  bool whole_plane_ = false;  // the window is the whole (unpadded) plane, global or not
  int kernel_h_ = 0, kernel_w_ = 0, stride_h_ = 1, stride_w_ = 1, pad_h_ = 0, pad_w_ = 0;
  int height_ = 0, width_ = 0, pooled_h_ = 0, pooled_w_ = 0;
  std::vector<int> ave_cols_;  // AVE: divisor's column extent for each output column
  std::vector<int> mask_;      // MAX: argmax within the input plane, -1 for none

  // Phases (see Reshape): phase (a, b) holds the padded input's rows a, a + stride_h, ...
  // and columns b, b + stride_w, ..., as phase_rows_ x phase_cols_ (then slack); the padding
  // and the clipped part of CEIL's last window hold a value that never changes the result
  // (-FLT_MAX for MAX, 0 for AVE). phases_ starts with the row phases (rows a, a + stride_h,
  // ..., all columns at pitch row_pitch_), which for stride_w 1 are the phases themselves.
  int phases_h_ = 0, phases_w_ = 0;  // phases used: min(stride, kernel) along each axis
  int phase_rows_ = 0, phase_cols_ = 0, phase_size_ = 0, phase_base_ = 0;
  int row_pitch_ = 0, row_phase_size_ = 0, copy_cols_ = 0;
  std::vector<int> row_dst_;  // where each input row goes in phases_, -1 if unread
  std::vector<float> phases_;
  std::vector<float> grad_phases_;  // AVE backward: phases_'s layout, gradients summed in
  bool covered_ = true;             // every input row and column is in some window
  // Kernel element k (row-major): its offset into phases_ from the flat index, and into the
  // input plane from the window's corner.
  std::vector<int> tap_src_, tap_idx_;
  int flat_n_ = 0;               // pooled_h_ * phase_cols_, rounded up to whole blocks
  std::vector<int> flat_base_;   // MAX: the window's corner in the input plane, per flat index
  std::vector<float> flat_out_;  // one plane's results (pooled_h_ x phase_cols_)
  std::vector<int> flat_arg_;
};

}  // namespace hogstream
