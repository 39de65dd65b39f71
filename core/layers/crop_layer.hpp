// Crop: bottom[0] cut to bottom[1]'s shape on every axis from `axis` (default 2) on, starting
// at `offset` (none: 0 on every cropped axis; one value: that on each; else one per cropped
// axis); the axes before `axis` are kept whole. bottom[1] only gives the shape (its gradient
// is zero).
#pragma once

#include <vector>

#include "core/layer.hpp"

namespace hogstream {

class CropLayer : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "Crop"; }
  int ExactNumBottomBlobs() const override { return 2; }
  int ExactNumTopBlobs() const override { return 1; }
  void Reshape(const Blobs& bottom, const Blobs& top) override;

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;

 private:
  // Walks every run of the last axis in the top; f(top offset, bottom offset, run length).
  template <class F>
  void ForEachRow(const Blob& x, const Blob& y, F&& f) const;
  std::vector<int> offsets_;  // per axis of bottom[0]
};

}  // namespace hogstream
