// SPP (spatial pyramid pooling): the input pooled at pyramid_height levels, level l into
// 2^l x 2^l bins (kernel = ceil(H / bins), stride = kernel, padding to centre the bins), each
// level flattened per image and the levels concatenated: top (N, C * sum over l of 4^l),
// whatever the input's height and width. With pyramid_height 1 the top is the one level's
// pooling output itself, (N, C, 1, 1), as in Caffe. MAX or AVE (spp_param.pool).
#pragma once

#include <memory>
#include <vector>

#include "core/layer.hpp"

namespace hogstream {

class SPPLayer : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "SPP"; }
  int ExactNumBottomBlobs() const override { return 1; }
  int ExactNumTopBlobs() const override { return 1; }
  void LayerSetUp(const Blobs& bottom, const Blobs& top) override;
  void Reshape(const Blobs& bottom, const Blobs& top) override;

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;

 private:
  // The pooling layer of each level for an input of height x width (rebuilt when it changes).
  void BuildLevels(const Blob& bottom);
  int levels_ = 0, height_ = -1, width_ = -1;
  std::vector<std::unique_ptr<Layer>> pools_;
  std::vector<std::unique_ptr<Blob>> pooled_;  // each level's output
  Blob scratch_;  // backward: one level's gradient to the input, summed into the bottom's
};

}  // namespace hogstream
