// HDF5 files in and out of a net (libhdf5's C API, every call under one lock: Debian's serial
// library is not built thread-safe, and Hogwild solvers run many layers at once).
//
// "HDF5Data": hdf5_data_param.source is a text file listing HDF5 files, one per line. Each
// file holds one dataset per top, named as the top, all with the same first dimension (the
// rows); top t is (batch_size, the dataset's other dimensions), values as floats. Batches run
// through the rows of each file and on to the next file, round and round; with `shuffle`, the
// files' order and each file's rows are shuffled on every pass. The next file is read on a
// background thread while the current one is served, so a solver never waits on the disk
// unless a file takes longer to read than its batches take to train. A solver of a job with
// disjoint data partitions (see core/context.hpp) reads only its part of each file's rows.
//
// "HDF5Output": writes its bottoms, appended batch by batch, to hdf5_output_param.file_name
// (created afresh at SetUp) as the datasets "data" and "label" (Caffe's names). No tops.
#pragma once

#include <future>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/layer.hpp"

namespace hogstream {

class HDF5DataLayer : public Layer {
 public:
  using Layer::Layer;
  ~HDF5DataLayer() override;
  const char* type() const override { return "HDF5Data"; }
  int ExactNumBottomBlobs() const override { return 0; }
  int MinTopBlobs() const override { return 1; }
  void LayerSetUp(const Blobs& bottom, const Blobs& top) override;
  void Reshape(const Blobs& bottom, const Blobs& top) override;

  // One file's datasets, in the tops' order (public for the loader in hdf5_layers.cpp).
  struct File {
    std::vector<std::vector<float>> data;  // per top: rows x row_size[t]
    size_t rows = 0;
  };

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs&, const std::vector<bool>&, const Blobs&) override {}

 private:
  void NextFile();  // takes the loaded next file, starts loading the one after

  std::vector<std::string> files_, names_;  // files in read order; dataset names (= tops)
  std::vector<std::vector<int>> shapes_;    // per top, the dimensions after the rows
  std::vector<size_t> row_size_;
  int batch_size_ = 0;
  bool shuffle_ = false;
  std::vector<size_t> order_;   // this pass's order of files_
  size_t pos_ = 0, next_pos_ = 0;  // where `current_` and `next_` are in it
  File current_;
  std::vector<size_t> rows_;  // the current file's rows to read, in order
  size_t row_ = 0;
  std::future<File> next_;
  std::mt19937 rng_;
  bool started_ = false;
};

class HDF5OutputLayer : public Layer {
 public:
  using Layer::Layer;
  ~HDF5OutputLayer() override;
  const char* type() const override { return "HDF5Output"; }
  int ExactNumBottomBlobs() const override { return 2; }
  int ExactNumTopBlobs() const override { return 0; }
  void LayerSetUp(const Blobs& bottom, const Blobs& top) override;
  void Reshape(const Blobs& bottom, const Blobs& top) override {}

 protected:
  void Forward_cpu(const Blobs& bottom, const Blobs& top) override;
  void Backward_cpu(const Blobs&, const std::vector<bool>&, const Blobs&) override {}

 private:
  int64_t file_ = -1;       // hid_t of the open file
  int64_t datasets_[2] = {-1, -1};
  uint64_t rows_ = 0;       // rows written so far
};

}  // namespace hogstream
