// Flatten layer: the top shape for the flattened axis span.
#include "core/layers/flatten_layer.hpp"

namespace hogstream {

void FlattenLayer::Reshape(const Blobs& bottom, const Blobs& top) {
  HS_REQUIRE(top[0] != bottom[0]) << "Flatten cannot work in place";
  const Blob& b = *bottom[0];
  const int n = b.num_axes();
  const auto& p = param_.flatten_param();
  for (int a : {p.axis(), p.end_axis()})
    HS_REQUIRE(a >= -n && a < n) << "flatten axis " << a << " out of range for bottom of shape "
                                 << b.shape_string();
  const int start = b.CanonicalAxisIndex(p.axis()), end = b.CanonicalAxisIndex(p.end_axis());
  // As in Caffe, end_axis = axis - 1 is accepted and inserts an axis of size 1.
  HS_REQUIRE(start <= end + 1) << "flatten axis " << p.axis() << " is after end_axis "
                               << p.end_axis() << " for bottom of shape " << b.shape_string();
  std::vector<int> shape(b.shape().begin(), b.shape().begin() + start);
  shape.push_back(b.count(start, end + 1));
  shape.insert(shape.end(), b.shape().begin() + end + 1, b.shape().end());
  top[0]->Reshape(shape);
}

HS_REGISTER_LAYER(Flatten, FlattenLayer);

}  // namespace hogstream
