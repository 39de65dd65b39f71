// Filter layer, CPU passes: selected items copied forward, their gradients back.
#include "core/layers/filter_layer.hpp"

#include "core/math.hpp"

namespace hogstream {

bool FilterLayer::AllowForceBackward(int bottom_index) const {
  return bottom_index != selector_;
}

void FilterLayer::LayerSetUp(const Blobs& bottom, const Blobs& top) {
  HS_REQUIRE(top.size() + 1 == bottom.size())
      << "takes one top per bottom but the last (the selector): " << bottom.size()
      << " bottoms, " << top.size() << " tops";
  selector_ = static_cast<int>(bottom.size()) - 1;
}

void FilterLayer::Reshape(const Blobs& bottom, const Blobs& top) {
  const Blob& sel = *bottom[selector_];
  const int items = sel.num_axes() ? sel.shape(0) : 0;
  HS_REQUIRE(sel.num_axes() >= 1 && sel.count() == items)
      << "the selector (last bottom) must hold one value per item, shape (N) or (N, 1, ...); got "
      << sel.shape_string();
  kept_.clear();
  const float* s = sel.cpu_data();
  for (int i = 0; i < items; ++i)
    if (s[i] != 0.f) kept_.push_back(i);
  for (int b = 0; b < selector_; ++b) {
    HS_REQUIRE(bottom[b]->num_axes() >= 1 && bottom[b]->shape(0) == items)
        << "bottom " << b << " has shape " << bottom[b]->shape_string() << " but the selector "
        << items << " items";
    std::vector<int> shape = bottom[b]->shape();
    shape[0] = static_cast<int>(kept_.size());
    top[b]->Reshape(shape);
  }
}

void FilterLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  for (int b = 0; b < selector_; ++b) {
    const size_t inner = bottom[b]->count(1);
    const float* x = bottom[b]->cpu_data();
    float* y = top[b]->mutable_cpu_data();
    for (size_t k = 0; k < kept_.size(); ++k) copy(static_cast<int>(inner), x + kept_[k] * inner, y + k * inner);
  }
}

void FilterLayer::Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                               const Blobs& bottom) {
  HS_REQUIRE(!propagate_down[selector_])
      << "layer '" << param_.name() << "': no gradient flows to the selector (last bottom)";
  for (int b = 0; b < selector_; ++b) {
    if (!propagate_down[b]) continue;
    const size_t inner = bottom[b]->count(1);
    const float* dy = top[b]->cpu_diff();
    float* dx = bottom[b]->mutable_cpu_diff();
    set(static_cast<int>(bottom[b]->count()), 0.f, dx);
    for (size_t k = 0; k < kept_.size(); ++k) copy(static_cast<int>(inner), dy + k * inner, dx + kept_[k] * inner);
  }
}

HS_REGISTER_LAYER(Filter, FilterLayer);

}  // namespace hogstream
