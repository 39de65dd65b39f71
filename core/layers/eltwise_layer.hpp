// Eltwise: element-wise combination of two or more same-shaped bottoms, as Caffe's layer:
// SUM (weighted by one coeff per bottom, default 1), PROD (gradient from the product of the
// other bottoms with stable_prod_grad, else top / bottom), MAX (gradient to the bottom that
// held the maximum; of the first two, ties go to bottom 1, later bottoms must be larger).
#pragma once

#include <vector>

#include "core/layer.hpp"

namespace hogstream {

class EltwiseLayer : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "Eltwise"; }
  Layouts LayoutSupport() const override { return Layouts::kAny; }
  int MinBottomBlobs() const override { return 2; }
  int ExactNumTopBlobs() const override { return 1; }
  void LayerSetUp(const Blobs& bottom, const Blobs& top) override;
  void Reshape(const Blobs& bottom, const Blobs& top) override;

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;


 // Protected for the GPU twins (core/layers/*.cu), which derive from this class.
 protected:
  pb::EltwiseParameter::EltwiseOp op_ = pb::EltwiseParameter::SUM;
  std::vector<float> coeff_;  // SUM: one per bottom
  std::vector<int> mask_;     // MAX: the bottom holding each maximum
};

}  // namespace hogstream
