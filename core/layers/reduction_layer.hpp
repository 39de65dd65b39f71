// Reduction: for each index of the axes before `axis` (default 0: the whole blob to a scalar),
// one value over all the axes from `axis` on: SUM, ASUM (sum of |x|), SUMSQ (sum of x^2) or
// MEAN, times `coeff` (default 1). The top's shape is the bottom's axes before `axis`.
#pragma once

#include <vector>

#include "core/layer.hpp"

namespace hogstream {

class ReductionLayer : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "Reduction"; }
  int ExactNumBottomBlobs() const override { return 1; }
  int ExactNumTopBlobs() const override { return 1; }
  void Reshape(const Blobs& bottom, const Blobs& top) override;

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;

 private:
  int outer_ = 0, dim_ = 0;  // counts before `axis` and from it on
  float coeff_ = 1.f;        // with MEAN, coeff / dim
};

}  // namespace hogstream
