// Bias layer, CPU passes: the broadcast of ScaleLayer with an addition; the bias gradient sums
// the top gradient over the outer and inner dimensions.
#include "core/layers/bias_layer.hpp"

#include "core/filler.hpp"
#include "core/math.hpp"

namespace hogstream {

void BiasLayer::LayerSetUp(const Blobs& bottom, const Blobs& top) {
  if (bottom.size() > 1) return;
  const pb::BiasParameter& p = param_.bias_param();
  const Blob& x = *bottom[0];
  const int axis = x.InputAxisIndex(p.axis());
  HS_REQUIRE(p.num_axes() >= -1)
      << "num_axes must be >= 0, or -1 for all axes from axis on; got " << p.num_axes();
  const int end = p.num_axes() == -1 ? x.num_axes() : axis + p.num_axes();
  HS_REQUIRE(end <= x.num_axes()) << "a bias of " << p.num_axes() << " axes from axis " << axis
                                  << " extends past input " << x.shape_string();
  blobs_.push_back(std::make_shared<Blob>(
      std::vector<int>(x.shape().begin() + axis, x.shape().begin() + end)));
  pb::FillerParameter filler = p.filler();
  if (!p.has_filler()) filler.set_value(0.f);  // constant 0
  Fill(filler, blobs_.back().get());
  set_param_propagate_down(0, true);
}

void BiasLayer::Reshape(const Blobs& bottom, const Blobs& top) {
  const Blob& x = *bottom[0];
  const Blob& b = bottom.size() > 1 ? *bottom[1] : *blobs_[0];
  const int axis = b.num_axes() == 0 ? 0 : x.InputAxisIndex(param_.bias_param().axis());
  bool fits = x.num_axes() >= axis + b.num_axes();
  for (int i = 0; fits && i < b.num_axes(); ++i) fits = x.shape(axis + i) == b.shape(i);
  HS_REQUIRE(fits) << "bias of shape " << b.shape_string() << " does not match input "
                   << x.shape_string() << " from axis " << axis;
  outer_ = x.count(0, axis);
  bias_dim_ = b.count();
  inner_ = x.count(axis + b.num_axes());
  top[0]->ReshapeLike(x);
}

void BiasLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  const float* x = bottom[0]->cpu_data();
  const float* b = (bottom.size() > 1 ? bottom[1] : blobs_[0].get())->cpu_data();
  float* y = top[0]->mutable_cpu_data();  // may be x (in place)
  for (int o = 0; o < outer_; ++o) {
    for (int d = 0; d < bias_dim_; ++d) {
      const size_t off = (static_cast<size_t>(o) * bias_dim_ + d) * inner_;
      const float bd = b[d];
      for (int i = 0; i < inner_; ++i) y[off + i] = x[off + i] + bd;
    }
  }
}

// A learned bias accumulates its gradient (the solver clears it); bottom[1] gets its gradient
// assigned.
void BiasLayer::Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                             const Blobs& bottom) {
  const float* dy = top[0]->cpu_diff();
  if (propagate_down[0] && bottom[0] != top[0])
    copy(bottom[0]->count(), dy, bottom[0]->mutable_cpu_diff());
  const bool learned = bottom.size() == 1;
  const bool want_db = learned ? param_propagate_down(0) : static_cast<bool>(propagate_down[1]);
  if (!want_db) return;
  float* db = (learned ? blobs_[0].get() : bottom[1])->mutable_cpu_diff();
  for (int d = 0; d < bias_dim_; ++d) {
    double sum = 0;
    for (int o = 0; o < outer_; ++o) {
      const float* g = dy + (static_cast<size_t>(o) * bias_dim_ + d) * inner_;
      for (int i = 0; i < inner_; ++i) sum += g[i];
    }
    db[d] = (learned ? db[d] : 0.f) + static_cast<float>(sum);
  }
}

HS_REGISTER_LAYER(Bias, BiasLayer);

}  // namespace hogstream
