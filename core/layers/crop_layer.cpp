// Crop layer, CPU passes: row by row (runs along the last axis) between the top and the
// offset window of bottom[0].
#include "core/layers/crop_layer.hpp"

#include "core/math.hpp"

namespace hogstream {

void CropLayer::Reshape(const Blobs& bottom, const Blobs& top) {
  const pb::CropParameter& p = param_.crop_param();
  const Blob& x = *bottom[0];
  const Blob& like = *bottom[1];
  const int axes = x.num_axes();
  HS_REQUIRE(like.num_axes() == axes)
      << "bottoms must have the same number of axes: " << x.shape_string() << " and "
      << like.shape_string();
  const int start = x.InputAxisIndex(p.axis());
  HS_REQUIRE(p.offset_size() <= 1 || p.offset_size() == axes - start)
      << "crop_param has " << p.offset_size() << " offsets; give 0, 1 or one per cropped axis ("
      << axes - start << " from axis " << start << ")";
  offsets_.assign(axes, 0);
  std::vector<int> shape = x.shape();
  for (int i = start; i < axes; ++i) {
    const unsigned off = p.offset_size() == 0   ? 0u
                         : p.offset_size() == 1 ? p.offset(0)
                                                : p.offset(i - start);
    HS_REQUIRE(static_cast<long long>(off) + like.shape(i) <= x.shape(i))
        << "crop of " << like.shape(i) << " from offset " << off << " does not fit axis " << i
        << " of input " << x.shape_string();
    offsets_[i] = static_cast<int>(off);
    shape[i] = like.shape(i);
  }
  top[0]->Reshape(shape);
}

template <class F>
void CropLayer::ForEachRow(const Blob& x, const Blob& y, F&& f) const {
  const int axes = y.num_axes();
  if (y.count() == 0) return;
  if (axes == 0) {
    f(0, 0, 1);
    return;
  }
  const int row = y.shape(axes - 1);
  const int rows = y.count() / row;
  std::vector<int> idx(axes, 0);  // index of the row's first element in y
  for (int r = 0; r < rows; ++r) {
    size_t xo = 0;
    for (int a = 0; a < axes; ++a) xo = xo * x.shape(a) + idx[a] + offsets_[a];
    f(static_cast<size_t>(r) * row, xo, row);
    for (int a = axes - 2; a >= 0; --a) {  // next row
      if (++idx[a] < y.shape(a)) break;
      idx[a] = 0;
    }
  }
}

void CropLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  const float* x = bottom[0]->cpu_data();
  float* y = top[0]->mutable_cpu_data();
  ForEachRow(*bottom[0], *top[0], [&](size_t yo, size_t xo, int n) { copy(n, x + xo, y + yo); });
}

void CropLayer::Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                             const Blobs& bottom) {
  if (propagate_down[1]) set(bottom[1]->count(), 0.f, bottom[1]->mutable_cpu_diff());
  if (!propagate_down[0]) return;
  const float* dy = top[0]->cpu_diff();
  float* dx = bottom[0]->mutable_cpu_diff();
  set(bottom[0]->count(), 0.f, dx);
  ForEachRow(*bottom[0], *top[0], [&](size_t yo, size_t xo, int n) { copy(n, dy + yo, dx + xo); });
}

HS_REGISTER_LAYER(Crop, CropLayer);

}  // namespace hogstream
