#include "data/device_prefetch.hpp"

#include <chrono>
#include <cstring>
#include <thread>

#include "base/common.hpp"

namespace hogstream {

DevicePrefetcher::DevicePrefetcher(DeviceApi& api, size_t batch_bytes, int depth) : api_(api), bytes_(batch_bytes) {
  HS_REQUIRE(batch_bytes > 0 && depth >= 2) << "a device prefetch needs batches and two buffers at least";
  stream_ = api_.CreateStream();
  buffers_.resize(static_cast<size_t>(depth));
  for (Buffer& b : buffers_) {
    b.device = api_.Alloc(bytes_);
    b.staging = api_.AllocPinned(bytes_);
    b.copied = api_.CreateEvent();
    b.released = api_.CreateEvent();
  }
}

DevicePrefetcher::~DevicePrefetcher() {
  api_.Synchronize(stream_);
  for (Buffer& b : buffers_) {
    api_.DestroyEvent(b.copied);
    api_.DestroyEvent(b.released);
    api_.Free(b.device);
    api_.FreePinned(b.staging);
  }
  api_.DestroyStream(stream_);
}

bool DevicePrefetcher::CanSubmit() {
  Buffer& b = buffers_[static_cast<size_t>(next_fill_)];
  return !b.queued && !b.in_use && api_.Query(b.copied);
}

void DevicePrefetcher::Submit(const void* batch) {
  Buffer& b = buffers_[static_cast<size_t>(next_fill_)];
  HS_CHECK(!b.queued && !b.in_use) << "DevicePrefetcher::Submit with every buffer in use (take one with Next first)";
  // Its staging memory is free once its last copy has left (a few microseconds at most, since
  // the copy was queued a batch ago).
  while (!api_.Query(b.copied)) std::this_thread::yield();
  std::memcpy(b.staging, batch, bytes_);
  api_.WaitEvent(stream_, b.released);  // the consumer's last use of this buffer first
  api_.CopyAsync(b.device, b.staging, bytes_, CopyKind::kHostToDevice, stream_);
  api_.Record(b.copied, stream_);
  b.queued = true;
  ready_.push_back(next_fill_);
  next_fill_ = (next_fill_ + 1) % static_cast<int>(buffers_.size());
}

const void* DevicePrefetcher::Next(StreamId compute) {
  HS_CHECK(!ready_.empty()) << "DevicePrefetcher::Next with no batch submitted";
  HS_CHECK(taken_ < 0) << "DevicePrefetcher::Next before Done of the last batch";
  const int i = ready_.front();
  ready_.pop_front();
  Buffer& b = buffers_[static_cast<size_t>(i)];
  api_.WaitEvent(compute, b.copied);
  b.queued = false;
  b.in_use = true;
  taken_ = i;
  return b.device;
}

void DevicePrefetcher::Done(StreamId compute) {
  HS_CHECK(taken_ >= 0) << "DevicePrefetcher::Done without a batch from Next";
  Buffer& b = buffers_[static_cast<size_t>(taken_)];
  api_.Record(b.released, compute);
  b.in_use = false;
  taken_ = -1;
}

const void* DeviceBatches::Next(StreamId compute, const std::function<void(void*)>& fill) {
  if (started_) {
    pre_.Done(compute);  // the last batch, once what was queued on `compute` so far has run
  } else {
    fill(host_.data());  // the first batch, not yet under way
    pre_.Submit(host_.data());
    started_ = true;
  }
  const void* batch = pre_.Next(compute);
  fill(host_.data());  // the next one, on the bus while this one trains
  pre_.Submit(host_.data());
  return batch;
}

}  // namespace hogstream
