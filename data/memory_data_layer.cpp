// MemoryData layer: copies the next batch out of the caller's arrays.
#include "data/memory_data_layer.hpp"

#include <cstring>

namespace hogstream {

void MemoryDataLayer::LayerSetUp(const Blobs& bottom, const Blobs& top) {
  const pb::MemoryDataParameter& p = param_.memory_data_param();
  const int64_t dims[] = {p.batch_size(), p.channels(), p.height(), p.width()};
  for (int64_t d : dims)
    HS_REQUIRE(d > 0) << "memory_data_param needs batch_size, channels, height and width, each > 0";
  CheckedShape({dims[0], dims[1], dims[2], dims[3]}, "memory_data_param");
  batch_size_ = static_cast<int>(dims[0]);
  channels_ = static_cast<int>(dims[1]);
  height_ = static_cast<int>(dims[2]);
  width_ = static_cast<int>(dims[3]);
}

void MemoryDataLayer::Reshape(const Blobs& bottom, const Blobs& top) {
  top[0]->Reshape({batch_size_, channels_, height_, width_});
  top[1]->Reshape({batch_size_});
}

void MemoryDataLayer::Reset(const float* data, const float* labels, int n) {
  HS_REQUIRE(data && labels) << "layer '" << param_.name() << "': Reset needs data and labels";
  HS_REQUIRE(n > 0 && n % batch_size_ == 0)
      << "layer '" << param_.name() << "': " << n << " items is not a positive multiple of the batch size "
      << batch_size_;
  data_ = data;
  labels_ = labels;
  n_ = n;
  pos_ = 0;
}

void MemoryDataLayer::set_batch_size(int batch_size) {
  HS_REQUIRE(batch_size > 0 && (n_ == 0 || n_ % batch_size == 0))
      << "layer '" << param_.name() << "': batch size " << batch_size << " does not divide the " << n_
      << " items given";
  batch_size_ = batch_size;
}

void MemoryDataLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  HS_REQUIRE(data_) << "layer '" << param_.name() << "' (MemoryData) has no data: call Reset first";
  const size_t item = static_cast<size_t>(channels_) * height_ * width_;
  std::memcpy(top[0]->mutable_cpu_data(), data_ + pos_ * item, batch_size_ * item * sizeof(float));
  std::memcpy(top[1]->mutable_cpu_data(), labels_ + pos_, batch_size_ * sizeof(float));
  pos_ = (pos_ + batch_size_) % n_;
}

HS_REGISTER_LAYER(MemoryData, MemoryDataLayer);

}  // namespace hogstream
