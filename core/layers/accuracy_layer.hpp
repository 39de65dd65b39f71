// Accuracy: the fraction of positions whose true label (bottom 1) is among the top_k scores
// (bottom 0, classes along accuracy_param.axis); positions labelled ignore_label are skipped.
// An optional second top holds the accuracy per class (0 for a class with no examples).
//
// Ties count against the prediction, as in Caffe: a position is correct when fewer than
// top_k other classes score at least as high as the true class.
#pragma once

#include "core/layer.hpp"

namespace hogstream {

class AccuracyLayer : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "Accuracy"; }
  int ExactNumBottomBlobs() const override { return 2; }
  int MinTopBlobs() const override { return 1; }
  int MaxTopBlobs() const override { return 2; }
  // A metric, not a loss: force_backward never routes gradients through it.
  bool AllowForceBackward(int) const override { return false; }
  void Reshape(const Blobs& bottom, const Blobs& top) override;

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;

 protected:  // (and the GPU twin's, accuracy_layer.cu)
  int outer_ = 0, channels_ = 0, inner_ = 0;
};

}  // namespace hogstream
