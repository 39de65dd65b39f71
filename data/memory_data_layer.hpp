// "MemoryData": batches taken from arrays the program hands over (Caffe's MemoryDataLayer, for
// embedding the engine in C++): Reset(data, labels, n) points the layer at n items of
// channels x height x width floats and n labels, held by the caller until the next Reset;
// each Forward gives the next batch_size of them, round and round. n must be a multiple of
// batch_size. A Forward before any Reset is an Error, as is a batch of a different size
// (set_batch_size changes it between passes).
#pragma once

#include <vector>

#include "core/layer.hpp"

namespace hogstream {

class MemoryDataLayer : public Layer {
 public:
  using Layer::Layer;
  const char* type() const override { return "MemoryData"; }
  int ExactNumBottomBlobs() const override { return 0; }
  int ExactNumTopBlobs() const override { return 2; }
  void LayerSetUp(const Blobs& bottom, const Blobs& top) override;
  void Reshape(const Blobs& bottom, const Blobs& top) override;

  // The caller keeps `data` (n * channels * height * width floats) and `labels` (n) alive.
  void Reset(const float* data, const float* labels, int n);
  void set_batch_size(int batch_size);
  int batch_size() const { return batch_size_; }

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs&, const std::vector<bool>&, const Blobs&) override {}

 private:
  int batch_size_ = 0, channels_ = 0, height_ = 0, width_ = 0;
  const float* data_ = nullptr;
  const float* labels_ = nullptr;
  int n_ = 0, pos_ = 0;
};

}  // namespace hogstream
