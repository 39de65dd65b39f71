// LRN: local response normalisation of an N x C x H x W input, y = x * s^-beta, as Caffe
// defines it for both regions:
//   ACROSS_CHANNELS: s = k + alpha / n * sum of x^2 over the n channels centred on x's (a
//                    running sum along the channels);
//   WITHIN_CHANNEL:  s = 1 + alpha * (average of x^2 over the n x n window centred on x, zero
//                    padded, always divided by n * n), which is what Caffe's split / square /
//                    AVE pooling / power / product composition computes (k is not used).
#pragma once

#include <vector>

#include "core/layer.hpp"

namespace hogstream {

class LRNLayer : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "LRN"; }
  int ExactNumBottomBlobs() const override { return 1; }
  int ExactNumTopBlobs() const override { return 1; }
  void LayerSetUp(const Blobs& bottom, const Blobs& top) override;
  void Reshape(const Blobs& bottom, const Blobs& top) override;

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                    const Blobs& bottom) override;


 // Protected for the GPU twins (core/layers/*.cu), which derive from this class.
 protected:
  void ForwardAcross(const float* x, float* s) const;
  void ForwardWithin(const float* x, float* s);
  void BackwardAcross(const float* x, const float* y, const float* s, const float* dy,
                      float* dx);
  void BackwardWithin(const float* x, const float* y, const float* s, const float* dy,
                      float* dx);
  // out = sum of `in` over the size_ x size_ window centred on each point (zero padded).
  void WindowSum(const float* in, float* out) const;

  bool across_ = true;
  int size_ = 5, half_ = 2;
  float alpha_ = 1.f, beta_ = 0.75f, k_ = 1.f;
  int channels_ = 0, height_ = 0, width_ = 0;
  Blob scale_;               // s for every input element, kept for backward
  std::vector<float> work_;  // one image (across) or two planes (within) of scratch
};

}  // namespace hogstream
