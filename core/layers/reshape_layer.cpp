// Reshape layer: parses the new shape once, then resolves it against each bottom shape.
#include "core/layers/reshape_layer.hpp"

namespace hogstream {

void ReshapeLayer::LayerSetUp(const Blobs& bottom, const Blobs& top) {
  HS_REQUIRE(top[0] != bottom[0]) << "Reshape cannot work in place";
  const pb::BlobShape& shape = param_.reshape_param().shape();
  copy_axes_.clear();
  inferred_axis_ = -1;
  constant_count_ = 1;
  for (int i = 0; i < shape.dim_size(); ++i) {
    const long long d = shape.dim(i);
    HS_REQUIRE(d >= -1) << "reshape dimension " << d << " is invalid (0 copies, -1 infers)";
    if (d == 0) {
      copy_axes_.push_back(i);
    } else if (d == -1) {
      HS_REQUIRE(inferred_axis_ == -1) << "reshape shape has more than one -1 dimension";
      inferred_axis_ = i;
    } else {
      constant_count_ *= d;
    }
  }
}

void ReshapeLayer::Reshape(const Blobs& bottom, const Blobs& top) {
  const Blob& b = *bottom[0];
  const auto& p = param_.reshape_param();
  const int n = b.num_axes();
  const int start = p.axis() >= 0 ? p.axis() : n + p.axis() + 1;
  HS_REQUIRE(start >= 0 && start <= n)
      << "reshape axis " << p.axis() << " out of range for bottom of shape " << b.shape_string();
  HS_REQUIRE(p.num_axes() >= -1) << "reshape num_axes must be >= 0, or -1 for all";
  const int end = p.num_axes() == -1 ? n : start + p.num_axes();
  HS_REQUIRE(end <= n) << "reshape axis + num_axes = " << end << " is beyond bottom of shape "
                       << b.shape_string();

  const pb::BlobShape& mid = p.shape();
  std::vector<int> shape(b.shape().begin(), b.shape().begin() + start);
  for (int i = 0; i < mid.dim_size(); ++i) shape.push_back(static_cast<int>(mid.dim(i)));
  shape.insert(shape.end(), b.shape().begin() + end, b.shape().end());
  for (int i : copy_axes_) {
    HS_REQUIRE(start + i < n) << "reshape shape has a 0 at position " << i
                              << " but bottom of shape " << b.shape_string()
                              << " has no axis there to copy";
    shape[start + i] = b.shape(start + i);
  }
  if (inferred_axis_ >= 0) {
    long long known = constant_count_ * b.count(0, start) * b.count(end);
    for (int i : copy_axes_) known *= shape[start + i];
    HS_REQUIRE(known > 0 && b.count() % known == 0)
        << "bottom of shape " << b.shape_string()
        << " cannot be reshaped: its count is not a multiple of the given dimensions ("
        << known << ")";
    shape[start + inferred_axis_] = static_cast<int>(b.count() / known);
  }
  long long count = 1;
  for (int d : shape) count *= d;
  HS_REQUIRE(count == b.count()) << "cannot reshape bottom of shape " << b.shape_string()
                                 << " to " << ShapeString(shape) << ": counts differ";
  top[0]->Reshape(shape);
  top[0]->ShareData(b);
  top[0]->ShareDiff(b);
}

HS_REGISTER_LAYER(Reshape, ReshapeLayer);

}  // namespace hogstream
