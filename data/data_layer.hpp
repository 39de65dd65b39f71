// "Data": Caffe's LMDB / LevelDB input layer, with hogstream's extension of several sources mixed by
// probability. Tops: data (N x C x H' x W', from the first record after the crop) and an
// optional label (N). Records are read, decoded and transformed ahead of time by one
// background thread per source; Forward only assembles a batch from what they prepared.
// Encoded records (JPEG or PNG Datums) are decoded by the reader threads, in colour or gray as
// transform_param's force_color / force_gray say (else as stored).
//
// Mixing: each batch item comes from a source drawn at random by the normalised
// `probability` weights (equal when absent), with an RNG seeded from Context::Get().seed() at
// the first Forward (when the reader threads start, at Context::Get().data_shard()); each
// source's thread has its own RNG for rand_skip and the random crop/mirror. A source's items
// come out in its read order whatever the thread timing, so a fixed seed gives identical
// batches. TRAIN data with a partition (Context::data_part) is read in rounds: the partition,
// then the ranges Context::data_takeover gives (a dead machine's share), over and over.
#pragma once

#include <memory>
#include <random>
#include <vector>

#include "core/layer.hpp"
#include "data/records.hpp"
#include "data/transform.hpp"

namespace hogstream {

class DeviceBatches;  // data/device_prefetch.hpp

class DataLayer : public Layer {
 public:
  explicit DataLayer(const pb::LayerParameter& param);
  // Stops and joins the reader threads; they poll a stop flag, so this never waits on I/O.
  ~DataLayer() override;

  const char* type() const override { return "Data"; }
  int ExactNumBottomBlobs() const override { return 0; }
  int MinTopBlobs() const override { return 1; }
  int MaxTopBlobs() const override { return 2; }
  void LayerSetUp(const Blobs& bottom, const Blobs& top) override;
  void Reshape(const Blobs& bottom, const Blobs& top) override;

 protected:
  // What the layer reads and how: its sources (opened), their mixing weights, the batch and
  // the transformation. Data: data_param's LMDBs; ImageData overrides.
  struct Settings {
    std::vector<std::unique_ptr<Records>> sources;
    std::vector<double> weights;
    uint32_t batch_size = 0, prefetch = 0, rand_skip = 0;
    pb::TransformationParameter transform;
  };
  virtual Settings Configure();
  virtual const char* type_param() const { return "data_param"; }

  // Errors raised in a reader thread (a corrupt record, say) surface here as an Error.
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  // GPU mode: the batch goes to the device from pinned memory on its own stream, the next one
  // in flight while this one trains (DeviceBatches); the calling thread's stream waits for it.
  void Forward_gpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs&, const std::vector<bool>&, const Blobs&) override {}

 private:
  struct Source;  // one source, its reader thread and its queues (data_layer.cpp)
  void StartReaders();  // first Forward: the calling thread's Context gives seed and shard
  void Assemble(float* data, float* label);  // the next batch, from the readers (label may be null)

  std::vector<std::unique_ptr<Records>> cursors_;  // opened at SetUp, until the readers start
  std::vector<int> datum_shape_;
  uint32_t prefetch_ = 0, rand_skip_ = 0;

  std::unique_ptr<DataTransformer> transformer_;
  std::vector<std::unique_ptr<Source>> sources_;
  std::discrete_distribution<int> pick_;  // which source each batch item comes from
  std::mt19937 rng_;
  int batch_size_ = 0;
  std::vector<int> item_shape_;  // {C, H', W'}
  int item_count_ = 0;
  std::unique_ptr<DeviceBatches> device_;  // GPU mode: the batches' way to the device
};

// "ImageData": Caffe's list-file input layer, on the same readers: image_data_param.source
// lists "PATH LABEL" lines (PATH under root_folder); each image is read, decoded (colour
// unless is_color: false), resized to new_height x new_width when both are given, and
// transformed on the reader thread. shuffle: the list is shuffled at the start and at the end
// of each pass, in one order for every solver (see data/records.hpp), so partitions across
// solvers and machines stay disjoint. Images of different sizes need a resize or a crop.
class ImageDataLayer : public DataLayer {
 public:
  using DataLayer::DataLayer;
  const char* type() const override { return "ImageData"; }

 protected:
  Settings Configure() override;
  const char* type_param() const override { return "image_data_param"; }
};

// "WindowData": R-CNN's training input on the same readers: windows of images drawn from a
// window file, a fixed share of each batch foreground (see data/records.hpp's OpenWindowFile),
// cut with context, warped to crop_size (window_data_param's, else transform_param's), then
// mirrored, mean-subtracted and scaled by the transformation.
class WindowDataLayer : public DataLayer {
 public:
  using DataLayer::DataLayer;
  const char* type() const override { return "WindowData"; }

 protected:
  Settings Configure() override;
  const char* type_param() const override { return "window_data_param"; }
};

// One epoch of a solver's training data, in iterations of one solver: the records of the first
// Data layer of its TRAIN net (every source: LMDB or LevelDB) or the lines of ImageData's list,
// over that layer's batch size. 0 where it has neither, or a source does not exist or cannot be
// read (the net's own errors say why, later). Opens nothing it would create.
uint64_t EpochIterations(const pb::SolverParameter& solver);

}  // namespace hogstream
