// BatchReindex layer, CPU passes: item copies forward, accumulated item gradients backward.
#include "core/layers/batch_reindex_layer.hpp"

#include "core/math.hpp"

namespace hogstream {

void BatchReindexLayer::Reshape(const Blobs& bottom, const Blobs& top) {
  const Blob& x = *bottom[0];
  HS_REQUIRE(x.num_axes() >= 1) << "bottom[0] needs an item axis";
  HS_REQUIRE(bottom[1]->num_axes() == 1)
      << "the indices (bottom[1]) must be 1-d; got shape " << bottom[1]->shape_string();
  std::vector<int> shape = x.shape();
  shape[0] = bottom[1]->shape(0);
  top[0]->Reshape(shape);
}

int BatchReindexLayer::Index(const Blobs& bottom, int i) const {
  const float v = bottom[1]->cpu_data()[i];
  const int index = LabelValue(v);
  HS_REQUIRE(index >= 0 && index < bottom[0]->shape(0) && static_cast<float>(index) == v)
      << "layer '" << param_.name() << "': index " << v << " at position " << i
      << " is not an item of bottom[0] (0.." << bottom[0]->shape(0) - 1 << ")";
  return index;
}

void BatchReindexLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  const int inner = static_cast<int>(bottom[0]->count(1));
  const float* x = bottom[0]->cpu_data();
  float* y = top[0]->mutable_cpu_data();
  for (int i = 0; i < top[0]->shape(0); ++i)
    copy(inner, x + static_cast<size_t>(Index(bottom, i)) * inner, y + static_cast<size_t>(i) * inner);
}

void BatchReindexLayer::Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                                     const Blobs& bottom) {
  HS_REQUIRE(!propagate_down[1]) << "layer '" << param_.name()
                                 << "': no gradient flows to the indices (bottom[1])";
  if (!propagate_down[0]) return;
  const int inner = static_cast<int>(bottom[0]->count(1));
  const float* dy = top[0]->cpu_diff();
  float* dx = bottom[0]->mutable_cpu_diff();
  set(bottom[0]->count(), 0.f, dx);
  for (int i = 0; i < top[0]->shape(0); ++i)
    axpy(inner, 1.f, dy + static_cast<size_t>(i) * inner, dx + static_cast<size_t>(Index(bottom, i)) * inner);
}

HS_REGISTER_LAYER(BatchReindex, BatchReindexLayer);

}  // namespace hogstream
