// HDF5Data and HDF5Output (see hdf5_layers.hpp).
#include "data/hdf5_layers.hpp"

#include <hdf5.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <fstream>
#include <mutex>
#include <numeric>

#include "core/context.hpp"

namespace hogstream {

namespace {

// Every libhdf5 call of the process runs under this lock; its error printing is turned off
// (failures become our one-line Errors).
std::unique_lock<std::mutex> Hdf5Lock() {
  static std::mutex mu;
  std::unique_lock<std::mutex> lock(mu);
  static const bool quiet = [] { return H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr) >= 0; }();
  (void)quiet;
  return lock;
}

// An HDF5 handle closed at scope exit.
class Handle {
 public:
  Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Handle() {
    if (id_ >= 0) close_(id_);
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

// Reads the datasets `names` of one file. `expect` (may be empty: the first file) gives each
// dataset's dimensions after the rows; the ones found go to `found`.
HDF5DataLayer::File Load(const std::string& path, const std::vector<std::string>& names,
                         const std::vector<std::vector<int>>& expect, std::vector<std::vector<int>>* found) {
  auto lock = Hdf5Lock();
  HDF5DataLayer::File file;
  Handle f(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  HS_REQUIRE(f.ok()) << "cannot open HDF5 file '" << path << "'";
  std::vector<std::vector<int>> shapes;
  for (size_t t = 0; t < names.size(); ++t) {
    const std::string& name = names[t];
    HS_REQUIRE(H5Lexists(f.get(), name.c_str(), H5P_DEFAULT) > 0)
        << "HDF5 file '" << path << "' has no dataset '" << name << "' (one per top, named as the top)";
    Handle d(H5Dopen2(f.get(), name.c_str(), H5P_DEFAULT), H5Dclose);
    HS_REQUIRE(d.ok()) << "HDF5 file '" << path << "': '" << name << "' is not a dataset";
    Handle space(H5Dget_space(d.get()), H5Sclose);
    const int rank = H5Sget_simple_extent_ndims(space.get());
    HS_REQUIRE(rank >= 1 && rank <= 32) << "HDF5 file '" << path << "': dataset '" << name << "' has rank " << rank;
    std::vector<hsize_t> dims(rank);
    H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
    HS_REQUIRE(dims[0] > 0) << "HDF5 file '" << path << "': dataset '" << name << "' has no rows";
    HS_REQUIRE(t == 0 || dims[0] == file.rows)
        << "HDF5 file '" << path << "': dataset '" << name << "' has " << dims[0] << " rows but '" << names[0]
        << "' has " << file.rows;
    file.rows = dims[0];
    std::vector<int64_t> rest64(dims.begin() + 1, dims.end());
    const std::vector<int> rest = CheckedShape(rest64, "dataset '" + name + "' of '" + path + "'");
    HS_REQUIRE(expect.empty() || rest == expect[t])
        << "HDF5 file '" << path << "': dataset '" << name << "' rows are " << ShapeString(rest)
        << " but the first file's are " << ShapeString(expect[t]);
    size_t count = file.rows;
    for (int v : rest) count *= v;
    RequireMemory(count * sizeof(float), "dataset '" + name + "' of '" + path + "'");
    file.data.emplace_back(count);
    HS_REQUIRE(H5Dread(d.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, file.data.back().data()) >= 0)
        << "HDF5 file '" << path << "': cannot read dataset '" << name << "' as floats";
    shapes.push_back(rest);
  }
  if (found) *found = shapes;
  return file;
}

}  // namespace

HDF5DataLayer::~HDF5DataLayer() {
  if (next_.valid()) next_.wait();
}

void HDF5DataLayer::LayerSetUp(const Blobs& bottom, const Blobs& top) {
  const pb::HDF5DataParameter& p = param_.hdf5_data_param();
  HS_REQUIRE(p.has_source()) << "hdf5_data_param needs a source (a text file listing HDF5 files)";
  HS_REQUIRE(p.batch_size() > 0 && p.batch_size() <= INT_MAX) << "hdf5_data_param.batch_size must be positive";
  batch_size_ = static_cast<int>(p.batch_size());
  shuffle_ = p.shuffle();
  std::ifstream list(p.source());
  HS_REQUIRE(list) << "cannot open the HDF5 file list '" << p.source() << "'";
  for (std::string line; std::getline(list, line);) {
    const size_t b = line.find_first_not_of(" \t\r"), e = line.find_last_not_of(" \t\r");
    if (b != std::string::npos) files_.push_back(line.substr(b, e - b + 1));
  }
  HS_REQUIRE(!files_.empty()) << "the HDF5 file list '" << p.source() << "' names no files";
  for (size_t t = 0; t < top.size(); ++t)
    names_.push_back(t < static_cast<size_t>(param_.top_size()) ? param_.top(t) : std::to_string(t));
  // The first file now: its shapes are the tops', and a wrong file fails SetUp.
  current_ = Load(files_[0], names_, {}, &shapes_);
  for (const auto& s : shapes_) {
    std::vector<int64_t> dims = {batch_size_};
    dims.insert(dims.end(), s.begin(), s.end());
    CheckedShape(dims, "a top of layer '" + param_.name() + "'");
    row_size_.push_back(std::accumulate(s.begin(), s.end(), size_t{1}, std::multiplies<size_t>()));
  }
}

void HDF5DataLayer::Reshape(const Blobs& bottom, const Blobs& top) {
  for (size_t t = 0; t < top.size(); ++t) {
    std::vector<int> shape = {batch_size_};
    shape.insert(shape.end(), shapes_[t].begin(), shapes_[t].end());
    top[t]->Reshape(shape);
  }
}

void HDF5DataLayer::NextFile() {
  if (files_.size() > 1) {
    if (next_.valid()) {
      current_ = next_.get();
      pos_ = next_pos_;
    }
    // The file after this one is read meanwhile; a new pass starts in a new order.
    next_pos_ = pos_ + 1;
    if (next_pos_ == files_.size()) {
      next_pos_ = 0;
      if (shuffle_) std::shuffle(order_.begin(), order_.end(), rng_);
    }
    next_ = std::async(std::launch::async, [path = files_[order_[next_pos_]], names = names_, shapes = shapes_] {
      return Load(path, names, shapes, nullptr);
    });
  }
  // This solver's part of the rows (all of them outside a partitioned job).
  const size_t n = current_.rows;
  size_t first = 0, last = n;
  if (phase_ == pb::TRAIN && Context::Get().data_part() > 0) {
    const double shard = Context::Get().data_shard(), part = Context::Get().data_part();
    const auto at = [n](double f) { return std::min(n, static_cast<size_t>(f * static_cast<double>(n) + 1e-7)); };
    first = std::min(at(shard), n - 1);
    last = std::max(at(shard + part), first + 1);
  }
  rows_.resize(last - first);
  std::iota(rows_.begin(), rows_.end(), first);
  if (shuffle_) std::shuffle(rows_.begin(), rows_.end(), rng_);
  row_ = 0;
}

void HDF5DataLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  if (!started_) {  // the solver's seed and partition are known from the first pass on
    const uint64_t seed = Context::Get().seed();
    std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32), 5u};
    rng_.seed(seq);
    order_.resize(files_.size());
    std::iota(order_.begin(), order_.end(), 0);
    if (shuffle_) std::shuffle(order_.begin() + 1, order_.end(), rng_);  // the first is loaded already
    NextFile();
    started_ = true;
  }
  for (int i = 0; i < batch_size_; ++i) {
    if (row_ == rows_.size()) NextFile();
    for (size_t t = 0; t < top.size(); ++t) {
      const size_t len = row_size_[t];
      std::memcpy(top[t]->mutable_cpu_data() + i * len, current_.data[t].data() + rows_[row_] * len, len * sizeof(float));
    }
    ++row_;
  }
}

HDF5OutputLayer::~HDF5OutputLayer() {
  auto lock = Hdf5Lock();
  for (int64_t d : datasets_)
    if (d >= 0) H5Dclose(d);
  if (file_ >= 0) H5Fclose(file_);
}

void HDF5OutputLayer::LayerSetUp(const Blobs& bottom, const Blobs& top) {
  const std::string& name = param_.hdf5_output_param().file_name();
  HS_REQUIRE(!name.empty()) << "hdf5_output_param.file_name must be given";
  auto lock = Hdf5Lock();
  file_ = H5Fcreate(name.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  HS_REQUIRE(file_ >= 0) << "cannot create HDF5 file '" << name << "'";
}

void HDF5OutputLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  const std::string& name = param_.hdf5_output_param().file_name();
  static const char* kNames[2] = {"data", "label"};
  HS_REQUIRE(bottom[0]->num_axes() >= 1 && bottom[1]->num_axes() >= 1 && bottom[0]->shape(0) == bottom[1]->shape(0))
      << "layer '" << param_.name() << "': data and label need one row per item; got "
      << bottom[0]->shape_string() << " and " << bottom[1]->shape_string();
  const hsize_t n = bottom[0]->shape(0);
  auto lock = Hdf5Lock();
  for (int b = 0; b < 2; ++b) {
    const Blob& x = *bottom[b];
    std::vector<hsize_t> dims(x.shape().begin(), x.shape().end());
    if (datasets_[b] < 0) {  // extendible along the rows, chunked by one batch
      std::vector<hsize_t> start = dims, max = dims;
      start[0] = 0;
      max[0] = H5S_UNLIMITED;
      Handle space(H5Screate_simple(static_cast<int>(dims.size()), start.data(), max.data()), H5Sclose);
      Handle props(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
      std::vector<hsize_t> chunk = dims;
      chunk[0] = std::max<hsize_t>(n, 1);
      H5Pset_chunk(props.get(), static_cast<int>(chunk.size()), chunk.data());
      datasets_[b] = H5Dcreate2(file_, kNames[b], H5T_NATIVE_FLOAT, space.get(), H5P_DEFAULT, props.get(), H5P_DEFAULT);
      HS_REQUIRE(datasets_[b] >= 0) << "cannot create dataset '" << kNames[b] << "' in '" << name << "'";
    }
    std::vector<hsize_t> total = dims;
    total[0] = rows_ + n;
    HS_REQUIRE(H5Dset_extent(datasets_[b], total.data()) >= 0)
        << "'" << name << "': bottom " << b << " changed its shape to " << x.shape_string();
    Handle file_space(H5Dget_space(datasets_[b]), H5Sclose);
    std::vector<hsize_t> offset(dims.size(), 0);
    offset[0] = rows_;
    H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, offset.data(), nullptr, dims.data(), nullptr);
    Handle mem(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
    HS_REQUIRE(H5Dwrite(datasets_[b], H5T_NATIVE_FLOAT, mem.get(), file_space.get(), H5P_DEFAULT, x.cpu_data()) >= 0)
        << "cannot write to '" << name << "'";
  }
  rows_ += n;
  H5Fflush(file_, H5F_SCOPE_LOCAL);
}

HS_REGISTER_LAYER(HDF5Data, HDF5DataLayer);
HS_REGISTER_LAYER(HDF5Output, HDF5OutputLayer);

}  // namespace hogstream
