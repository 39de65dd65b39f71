// Blob: an N-d float tensor with a value (`data`) and a gradient (`diff`), each a SyncedMemory.
// Shapes are row-major, outermost first (N, C, H, W for images). Reshape only reallocates when
// the element count grows beyond what was allocated, so per-batch reshapes are free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/common.hpp"
#include "core/synced_memory.hpp"

namespace hogstream {
namespace pb {
class BlobProto;
class BlobShape;
}  // namespace pb

class Blob {
 public:
  Blob() = default;
  explicit Blob(const std::vector<int>& shape) { Reshape(shape); }
  Blob(int n, int c, int h, int w) { Reshape({n, c, h, w}); }
  Blob(const Blob&) = delete;
  Blob& operator=(const Blob&) = delete;

  void Reshape(const std::vector<int>& shape);
  void Reshape(const pb::BlobShape& shape);
  void ReshapeLike(const Blob& other) { Reshape(other.shape()); }

  const std::vector<int>& shape() const { return shape_; }
  int shape(int axis) const { return shape_[CanonicalAxisIndex(axis)]; }
  int num_axes() const { return static_cast<int>(shape_.size()); }
  int count() const { return count_; }
  // Product of dimensions [start, end).
  int count(int start, int end) const;
  int count(int start) const { return count(start, num_axes()); }
  // Maps a possibly negative axis (-1 = last) into [0, num_axes()); out of range is a Bug.
  int CanonicalAxisIndex(int axis) const;
  // The same for an axis a user gave (a layer parameter): out of range is an Error naming the
  // blob's shape.
  int InputAxisIndex(int axis) const;
  std::string shape_string() const;

  // Legacy 4-d accessors (missing axes read as 1).
  int num() const { return LegacyShape(0); }
  int channels() const { return LegacyShape(1); }
  int height() const { return LegacyShape(2); }
  int width() const { return LegacyShape(3); }
  int LegacyShape(int index) const;
  int offset(int n, int c = 0, int h = 0, int w = 0) const;
  int offset(const std::vector<int>& indices) const;

  const float* cpu_data() const;
  const float* cpu_diff() const;
  float* mutable_cpu_data();
  float* mutable_cpu_diff();
  const float* gpu_data() const;
  const float* gpu_diff() const;
  float* mutable_gpu_data();
  float* mutable_gpu_diff();
  // Point data/diff at memory owned elsewhere (count() floats), in a fresh SyncedMemory: blobs
  // that shared the old one keep it.
  void set_cpu_data(float* data);
  void set_cpu_diff(float* diff);
  // Point the current data memory at `data`: every blob sharing it follows.
  void redirect_cpu_data(float* data) { data_->set_cpu_data(data); }

  const std::shared_ptr<SyncedMemory>& data() const { return data_; }
  const std::shared_ptr<SyncedMemory>& diff() const { return diff_; }
  // Share the other blob's memory (same count required); used by in-place and reshape layers.
  void ShareData(const Blob& other);
  void ShareDiff(const Blob& other);

  // data -= diff (the plain gradient step; solvers scale diff first).
  void Update();
  float asum_data() const;
  float asum_diff() const;
  float sumsq_data() const;
  float sumsq_diff() const;
  void scale_data(float s);
  void scale_diff(float s);

  bool ShapeEquals(const pb::BlobProto& proto) const;
  // Copies values from a proto; reshapes when `reshape`, else the shapes must agree (Error).
  void FromProto(const pb::BlobProto& proto, bool reshape = true);
  void ToProto(pb::BlobProto* proto, bool write_diff = false) const;

 private:
  std::shared_ptr<SyncedMemory> data_, diff_;
  std::vector<int> shape_;
  int count_ = 0;
  int capacity_ = 0;
};

std::string ShapeString(const std::vector<int>& shape);

// Memory this process can have: physical memory, or the cgroup's limit (memory.max) when that
// is lower. Read once.
size_t MachineMemoryBytes();
// "2.9 TiB", "23 GiB", "512 B".
std::string HumanBytes(double bytes);
// Checks that a blob of `dims` (as the user gave them, before narrowing to int) can exist
// here: every dimension >= 0, at most INT_MAX elements, and its data and gradient within
// MachineMemoryBytes(). Returns the shape as ints; otherwise an Error that begins with `what`:
// "top 'data' would need 1000000x1x28x28 = 784000000000 floats (2.9 TiB); ...". Layers call
// it before allocating anything for a top.
std::vector<int> CheckedShape(const std::vector<int64_t>& dims, const std::string& what);
// Error "`what` would need HUMAN; this machine has HUMAN" when `bytes` exceed
// MachineMemoryBytes().
void RequireMemory(double bytes, const std::string& what);

}  // namespace hogstream
