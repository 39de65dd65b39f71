#include "core/blob.hpp"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "core/math.hpp"
#include "core/proto/hogstream.pb.h"

namespace hogstream {

std::string ShapeString(const std::vector<int>& shape) {
  std::ostringstream os;
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? " " : "") << shape[i];
  os << " (";
  long long count = 1;
  for (int d : shape) count *= d;
  os << count << ")";
  return os.str();
}

namespace {
// A number from a cgroup file, or 0 for "max", a missing file or anything else.
size_t CgroupLimit(const char* path) {
  std::ifstream in(path);
  unsigned long long v = 0;
  if (!(in >> v)) return 0;
  return static_cast<size_t>(v);
}

std::string DimsString(const std::vector<int64_t>& dims) {
  std::string s;
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? "x" : "") + std::to_string(dims[i]);
  return dims.empty() ? "a scalar" : s;
}
}  // namespace

size_t MachineMemoryBytes() {
  static const size_t bytes = [] {
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    size_t phys = pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page)
                                        : SIZE_MAX;
    // cgroup v2, then v1 (whose "no limit" is a huge number, which min() absorbs).
    for (const char* f : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
      const size_t limit = CgroupLimit(f);
      if (limit > 0) phys = std::min(phys, limit);
    }
    return phys;
  }();
  return bytes;
}

std::string HumanBytes(double bytes) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (bytes >= 1024 && u < 6) {
    bytes /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, bytes < 10 && u > 0 ? "%.1f %s" : "%.0f %s", bytes, units[u]);
  return buf;
}

void RequireMemory(double bytes, const std::string& what) {
  const double have = static_cast<double>(MachineMemoryBytes());
  HS_REQUIRE(bytes <= have) << what << " would need " << HumanBytes(bytes)
                            << "; this machine has " << HumanBytes(have);
}

std::vector<int> CheckedShape(const std::vector<int64_t>& dims, const std::string& what) {
  // Products in double: exact enough for the message, and they cannot overflow.
  double count = 1;
  for (int64_t d : dims) {
    HS_REQUIRE(d >= 0) << what << " has a negative dimension: " << DimsString(dims);
    count *= static_cast<double>(d);
  }
  const double bytes = count * sizeof(float);
  const double have = static_cast<double>(MachineMemoryBytes());
  auto floats = [&] {
    char n[32];
    std::snprintf(n, sizeof n, "%.0f", count);
    return DimsString(dims) + " = " + n + " floats (" + HumanBytes(bytes) + ")";
  };
  HS_REQUIRE(count <= INT_MAX) << what << " would need " << floats()
                               << "; a blob holds at most " << INT_MAX << " and this machine has "
                               << HumanBytes(have);
  HS_REQUIRE(2 * bytes <= have) << what << " would need " << floats()
                                << ", twice that with its gradient; this machine has "
                                << HumanBytes(have);
  return std::vector<int>(dims.begin(), dims.end());
}

void Blob::Reshape(const std::vector<int>& shape) {
  long long count = 1;
  for (int d : shape) {
    HS_REQUIRE(d >= 0) << "negative blob dimension in shape " << ShapeString(shape);
    count *= d;
    HS_REQUIRE(count <= INT_MAX) << "blob of shape " << ShapeString(shape) << " is too large";
  }
  shape_ = shape;
  count_ = static_cast<int>(count);
  if (count_ > capacity_ || !data_) {
    // Memory is taken lazily, at first use; refuse here what could never be had, so that the
    // error names a shape rather than surfacing as std::bad_alloc or the OOM killer later.
    if (count_ > capacity_)
      CheckedShape(std::vector<int64_t>(shape.begin(), shape.end()), "a blob");
    capacity_ = count_;
    data_ = std::make_shared<SyncedMemory>(static_cast<size_t>(capacity_) * sizeof(float));
    diff_ = std::make_shared<SyncedMemory>(static_cast<size_t>(capacity_) * sizeof(float));
  }
}

void Blob::Reshape(const pb::BlobShape& shape) {
  std::vector<int> dims;
  for (int i = 0; i < shape.dim_size(); ++i) {
    HS_REQUIRE(shape.dim(i) >= 0 && shape.dim(i) <= INT_MAX)
        << "blob dimension " << shape.dim(i) << " out of range";
    dims.push_back(static_cast<int>(shape.dim(i)));
  }
  Reshape(dims);
}

int Blob::count(int start, int end) const {
  HS_CHECK(start >= 0 && start <= end && end <= num_axes())
      << "count(" << start << ", " << end << ") of a " << num_axes() << "-axis blob";
  int c = 1;
  for (int i = start; i < end; ++i) c *= shape_[i];
  return c;
}

int Blob::CanonicalAxisIndex(int axis) const {
  HS_CHECK(axis >= -num_axes() && axis < num_axes())
      << "axis " << axis << " out of range for a " << num_axes() << "-axis blob";
  return axis < 0 ? axis + num_axes() : axis;
}

int Blob::InputAxisIndex(int axis) const {
  HS_REQUIRE(axis >= -num_axes() && axis < num_axes()) << "axis " << axis << " is out of range for input " << shape_string();
  return CanonicalAxisIndex(axis);
}

std::string Blob::shape_string() const { return ShapeString(shape_); }

int Blob::LegacyShape(int index) const {
  HS_CHECK(num_axes() <= 4) << "legacy 4-d accessor on a " << num_axes() << "-axis blob";
  if (index >= num_axes()) return 1;
  return shape_[index];
}

int Blob::offset(int n, int c, int h, int w) const {
  return ((n * channels() + c) * height() + h) * width() + w;
}

int Blob::offset(const std::vector<int>& indices) const {
  HS_CHECK(static_cast<int>(indices.size()) <= num_axes());
  int off = 0;
  for (int i = 0; i < num_axes(); ++i) {
    off *= shape_[i];
    if (i < static_cast<int>(indices.size())) off += indices[i];
  }
  return off;
}

const float* Blob::cpu_data() const { return static_cast<const float*>(data_->cpu_data()); }
const float* Blob::cpu_diff() const { return static_cast<const float*>(diff_->cpu_data()); }
float* Blob::mutable_cpu_data() { return static_cast<float*>(data_->mutable_cpu_data()); }
float* Blob::mutable_cpu_diff() { return static_cast<float*>(diff_->mutable_cpu_data()); }
const float* Blob::gpu_data() const { return static_cast<const float*>(data_->gpu_data()); }
const float* Blob::gpu_diff() const { return static_cast<const float*>(diff_->gpu_data()); }
float* Blob::mutable_gpu_data() { return static_cast<float*>(data_->mutable_gpu_data()); }
float* Blob::mutable_gpu_diff() { return static_cast<float*>(diff_->mutable_gpu_data()); }

void Blob::set_cpu_data(float* data) {
  // A fresh SyncedMemory, so blobs that shared the old one keep their memory.
  data_ = std::make_shared<SyncedMemory>(static_cast<size_t>(count_) * sizeof(float));
  data_->set_cpu_data(data);
  capacity_ = count_;
}

void Blob::set_cpu_diff(float* diff) {
  diff_ = std::make_shared<SyncedMemory>(static_cast<size_t>(count_) * sizeof(float));
  diff_->set_cpu_data(diff);
  capacity_ = count_;
}

void Blob::ShareData(const Blob& other) {
  HS_CHECK_EQ(count_, other.count());
  data_ = other.data();
}

void Blob::ShareDiff(const Blob& other) {
  HS_CHECK_EQ(count_, other.count());
  diff_ = other.diff();
}

void Blob::Update() { axpy(count_, -1.f, cpu_diff(), mutable_cpu_data()); }

float Blob::asum_data() const { return count_ ? asum(count_, cpu_data()) : 0.f; }
float Blob::asum_diff() const { return count_ ? asum(count_, cpu_diff()) : 0.f; }
float Blob::sumsq_data() const { return count_ ? dot(count_, cpu_data(), cpu_data()) : 0.f; }
float Blob::sumsq_diff() const { return count_ ? dot(count_, cpu_diff(), cpu_diff()) : 0.f; }
void Blob::scale_data(float s) { scal(count_, s, mutable_cpu_data()); }
void Blob::scale_diff(float s) { scal(count_, s, mutable_cpu_diff()); }

static std::vector<int> ProtoShape(const pb::BlobProto& proto) {
  std::vector<int> shape;
  if (proto.has_num() || proto.has_channels() || proto.has_height() || proto.has_width()) {
    shape = {proto.num(), proto.channels(), proto.height(), proto.width()};
  } else {
    for (int i = 0; i < proto.shape().dim_size(); ++i)
      shape.push_back(static_cast<int>(proto.shape().dim(i)));
  }
  return shape;
}

bool Blob::ShapeEquals(const pb::BlobProto& proto) const {
  std::vector<int> other = ProtoShape(proto);
  if (proto.has_num() || proto.has_channels() || proto.has_height() || proto.has_width()) {
    // Legacy 4-d shapes compare against our shape padded with leading 1s.
    if (num_axes() > 4) return false;
    std::vector<int> padded(4 - num_axes(), 1);
    padded.insert(padded.end(), shape_.begin(), shape_.end());
    return padded == other;
  }
  return other == shape_;
}

void Blob::FromProto(const pb::BlobProto& proto, bool reshape) {
  if (reshape) {
    Reshape(ProtoShape(proto));
  } else {
    HS_REQUIRE(ShapeEquals(proto)) << "stored blob has shape " << ShapeString(ProtoShape(proto))
                                   << " but the net expects " << shape_string();
  }
  float* d = mutable_cpu_data();
  if (proto.double_data_size() > 0) {
    HS_REQUIRE(proto.double_data_size() == count_)
        << "stored blob has " << proto.double_data_size() << " values, expected " << count_;
    for (int i = 0; i < count_; ++i) d[i] = static_cast<float>(proto.double_data(i));
  } else {
    HS_REQUIRE(proto.data_size() == count_)
        << "stored blob has " << proto.data_size() << " values, expected " << count_;
    if (count_) std::memcpy(d, proto.data().data(), sizeof(float) * count_);
  }
  if (proto.diff_size() == count_ && count_ > 0) {
    std::memcpy(mutable_cpu_diff(), proto.diff().data(), sizeof(float) * count_);
  } else if (proto.double_diff_size() == count_ && count_ > 0) {
    float* g = mutable_cpu_diff();
    for (int i = 0; i < count_; ++i) g[i] = static_cast<float>(proto.double_diff(i));
  }
}

void Blob::ToProto(pb::BlobProto* proto, bool write_diff) const {
  proto->Clear();
  for (int d : shape_) proto->mutable_shape()->add_dim(d);
  proto->mutable_data()->Resize(count_, 0.f);
  if (count_) std::memcpy(proto->mutable_data()->mutable_data(), cpu_data(), sizeof(float) * count_);
  if (write_diff) {
    proto->mutable_diff()->Resize(count_, 0.f);
    if (count_)
      std::memcpy(proto->mutable_diff()->mutable_data(), cpu_diff(), sizeof(float) * count_);
  }
}

}  // namespace hogstream
