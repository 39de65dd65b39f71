#include "core/layers/scale_layer.hpp"

#include <array>

#include "core/filler.hpp"
#include "core/layers/batch_norm_layer.hpp"
#include "core/lane_sums.hpp"
#include "core/math.hpp"

namespace hogstream {

void ScaleLayer::LayerSetUp(const Blobs& bottom, const Blobs& top) {
  const pb::ScaleParameter& p = param_.scale_param();
  const Blob& x = *bottom[0];
  std::vector<int> shape;  // of the learned blobs
  if (bottom.size() == 1) {
    const int axis = x.InputAxisIndex(p.axis());
    HS_REQUIRE(p.num_axes() >= -1)
        << "num_axes must be >= 0, or -1 for all axes from axis on; got " << p.num_axes();
    const int end = p.num_axes() == -1 ? x.num_axes() : axis + p.num_axes();
    HS_REQUIRE(end <= x.num_axes()) << "a scale of " << p.num_axes() << " axes from axis "
                                    << axis << " extends past input " << x.shape_string();
    shape.assign(x.shape().begin() + axis, x.shape().begin() + end);
    blobs_.push_back(std::make_shared<Blob>(shape));
    pb::FillerParameter filler = p.filler();
    if (!p.has_filler()) filler.set_value(1.f);  // constant 1: the identity
    Fill(filler, blobs_.back().get());
  } else {
    shape = bottom[1]->shape();
  }
  if (p.bias_term()) {
    bias_index_ = static_cast<int>(blobs_.size());
    blobs_.push_back(std::make_shared<Blob>(shape));
    Fill(p.bias_filler(), blobs_.back().get());
  }
  for (size_t i = 0; i < blobs_.size(); ++i) set_param_propagate_down(static_cast<int>(i), true);
}

void ScaleLayer::Reshape(const Blobs& bottom, const Blobs& top) {
  const Blob& x = *bottom[0];
  const Blob& s = bottom.size() > 1 ? *bottom[1] : *blobs_[0];
  const int axis = s.num_axes() == 0 ? 0 : x.InputAxisIndex(param_.scale_param().axis());
  bool fits = x.num_axes() >= axis + s.num_axes();
  for (int i = 0; fits && i < s.num_axes(); ++i) fits = x.shape(axis + i) == s.shape(i);
  HS_REQUIRE(fits) << "scale of shape " << s.shape_string() << " does not match input "
                   << x.shape_string() << " from axis " << axis;
  outer_ = x.count(0, axis);
  scale_dim_ = s.count();
  inner_ = x.count(axis + s.num_axes());
  if (bottom[0] == top[0] && !bn_) bottom_copy_.ReshapeLike(x);
  top[0]->ReshapeLike(x);
}

bool ScaleLayer::PerChannelOf(const Blob& x) const {
  return blobs_.size() == static_cast<size_t>(bias_index_ >= 0 ? 2 : 1) && x.num_axes() >= 2 &&
         blobs_[0]->num_axes() == 1 && blobs_[0]->count() == x.shape(1) &&
         x.InputAxisIndex(param_.scale_param().axis()) == 1;
}

// bottom_copy_ is then never used (Reshape stops sizing it; blobs take memory at first use).
void ScaleLayer::FuseInto(BatchNormLayer* bn) { bn_ = bn; }

namespace {
// y = x * s (+ b) over one block of n values; in place, also keeps the input in `keep`.
void ScaleBlock(const float* __restrict x, int n, float s, float b, bool bias,
                float* __restrict y) {
  if (bias) {
    for (int i = 0; i < n; ++i) y[i] = x[i] * s + b;
  } else {
    for (int i = 0; i < n; ++i) y[i] = x[i] * s;
  }
}
void ScaleBlockInPlace(float* __restrict y, int n, float s, float b, bool bias,
                       float* __restrict keep) {
  if (bias) {
    for (int i = 0; i < n; ++i) keep[i] = y[i], y[i] = y[i] * s + b;
  } else {
    for (int i = 0; i < n; ++i) keep[i] = y[i], y[i] = y[i] * s;
  }
}
}  // namespace

void ScaleLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  if (bn_) return;  // done by the BatchNorm
  const bool in_place = bottom[0] == top[0];
  const float* x = bottom[0]->cpu_data();
  const float* s = (bottom.size() > 1 ? bottom[1] : blobs_[0].get())->cpu_data();
  const float* b = bias_index_ >= 0 ? blobs_[bias_index_]->cpu_data() : nullptr;
  float* y = top[0]->mutable_cpu_data();
  float* keep = in_place ? bottom_copy_.mutable_cpu_data() : nullptr;
  for (int o = 0; o < outer_; ++o) {
    for (int d = 0; d < scale_dim_; ++d) {
      const size_t off = (static_cast<size_t>(o) * scale_dim_ + d) * inner_;
      const float bd = b ? b[d] : 0.f;
      // In place, the input is copied in the same loop (the scale gradient needs it).
      if (in_place) {
        ScaleBlockInPlace(y + off, inner_, s[d], bd, b != nullptr, keep + off);
      } else {
        ScaleBlock(x + off, inner_, s[d], bd, b != nullptr, y + off);
      }
    }
  }
}

// Gradients of learned blobs accumulate into their diffs (the solver clears them); a scale
// given as bottom[1] gets its gradient assigned, as Caffe does. Scale element by scale element,
// one pass over its outer_ blocks of inner_ values takes the bias gradient (sum of dy) and the
// scale gradient (sum of dy * x), both in double (vectorised lanes), and dx = dy * s while the
// block is in cache; in place dx is dy, each dy read before its dx is written.
void ScaleLayer::Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                              const Blobs& bottom) {
  if (bn_) {  // the BatchNorm keeps this layer's input; the sums serve both layers
    const bool want_db = bias_index_ >= 0 && param_propagate_down(bias_index_);
    bn_->FusedScaleBackward(*top[0],
                            param_propagate_down(0) ? blobs_[0]->mutable_cpu_diff() : nullptr,
                            want_db ? blobs_[bias_index_]->mutable_cpu_diff() : nullptr);
    return;
  }
  const float* dy = top[0]->cpu_diff();
  const bool in_place = bottom[0] == top[0];
  const bool learned = bottom.size() == 1;
  Blob* scale_blob = learned ? blobs_[0].get() : bottom[1];
  const bool want_db = bias_index_ >= 0 && param_propagate_down(bias_index_);
  const bool want_ds = learned ? param_propagate_down(0) : static_cast<bool>(propagate_down[1]);
  float* db = want_db ? blobs_[bias_index_]->mutable_cpu_diff() : nullptr;
  float* ds = want_ds ? scale_blob->mutable_cpu_diff() : nullptr;
  const float* x = in_place ? bottom_copy_.cpu_data() : bottom[0]->cpu_data();
  const float* s = scale_blob->cpu_data();
  float* dx = propagate_down[0] ? bottom[0]->mutable_cpu_diff() : nullptr;
  // Blocks shorter than a lane block (a scale over the last axes): plain double sums, the
  // lanes' set-up and final adds would cost more than the block.
  const bool lanes = inner_ >= kSumLanes;
  for (int d = 0; d < scale_dim_; ++d) {
    LaneSums<2> sums;
    double sum_dy = 0, sum_dyx = 0;
    const float sd = s[d];
    for (int o = 0; o < outer_; ++o) {
      const size_t off = (static_cast<size_t>(o) * scale_dim_ + d) * inner_;
      const float* g = dy + off;
      const float* v = x + off;
      if ((db || ds) && lanes) {
        sums.Add(inner_, [g, v](int i) {
          return std::array<double, 2>{static_cast<double>(g[i]),
                                       static_cast<double>(g[i]) * v[i]};
        });
      } else if (db || ds) {
        for (int i = 0; i < inner_; ++i) {
          sum_dy += g[i];
          sum_dyx += static_cast<double>(g[i]) * v[i];
        }
      }
      if (dx) {
        float* out = dx + off;  // may be g (in place)
        for (int i = 0; i < inner_; ++i) out[i] = g[i] * sd;
      }
    }
    if (lanes) sum_dy = sums.Total(0), sum_dyx = sums.Total(1);
    if (db) db[d] += static_cast<float>(sum_dy);
    if (ds) ds[d] = (learned ? ds[d] : 0.f) + static_cast<float>(sum_dyx);
  }
}

HS_REGISTER_LAYER(Scale, ScaleLayer);

}  // namespace hogstream
