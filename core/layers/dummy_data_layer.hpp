// DummyData: tops of fixed shape filled by data_filler — one filler for all tops or one per
// top, constant 0 when none is given. Shapes come from `shape` (one for all tops or one per
// top) or from the legacy num/channels/height/width lists. As in Caffe, tops with a constant
// filler are filled once at set-up; the others are refilled on every Forward.
#pragma once

#include "core/layer.hpp"

namespace hogstream {

class DummyDataLayer : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "DummyData"; }
  int ExactNumBottomBlobs() const override { return 0; }
  int MinTopBlobs() const override { return 1; }
  void LayerSetUp(const Blobs& bottom, const Blobs& top) override;
  // The shapes are fixed at set-up.
  void Reshape(const Blobs& bottom, const Blobs& top) override {}

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override {}

 private:
  const pb::FillerParameter& FillerFor(int top_index) const {
    return fillers_.size() == 1 ? fillers_[0] : fillers_[top_index];
  }

  std::vector<pb::FillerParameter> fillers_;
};

}  // namespace hogstream
