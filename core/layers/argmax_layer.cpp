// ArgMax layer, CPU forward (a partial sort per run of values); backward only refuses.
#include "core/layers/argmax_layer.hpp"

#include <algorithm>
#include <utility>

namespace hogstream {

void ArgMaxLayer::LayerSetUp(const Blobs& bottom, const Blobs& top) {
  const pb::ArgMaxParameter& p = param_.argmax_param();
  HS_REQUIRE(p.top_k() >= 1) << "argmax_param.top_k must be at least 1; got " << p.top_k();
  HS_REQUIRE(p.top_k() <= 2147483647u) << "argmax_param.top_k " << p.top_k() << " is too large";
  top_k_ = static_cast<int>(p.top_k());
}

void ArgMaxLayer::Reshape(const Blobs& bottom, const Blobs& top) {
  const pb::ArgMaxParameter& p = param_.argmax_param();
  const Blob& x = *bottom[0];
  std::vector<int> shape;
  if (p.has_axis()) {
    axis_ = x.InputAxisIndex(p.axis());
    HS_REQUIRE(top_k_ <= x.shape(axis_))
        << "top_k " << top_k_ << " is more than axis " << axis_ << " of input "
        << x.shape_string() << " holds";
    shape = x.shape();
    shape[axis_] = top_k_;
  } else {
    HS_REQUIRE(x.num_axes() >= 1) << "ArgMax needs an input with axes";
    axis_ = -1;
    HS_REQUIRE(top_k_ <= x.count(1)) << "top_k " << top_k_ << " is more than the " << x.count(1)
                                     << " values of each item of input " << x.shape_string();
    shape.assign(std::max(3, x.num_axes()), 1);
    shape[0] = x.shape(0);
    shape[1] = p.out_max_val() ? 2 : 1;
    shape[2] = top_k_;
  }
  top[0]->Reshape(shape);
}

void ArgMaxLayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  const Blob& x = *bottom[0];
  const bool values = param_.argmax_param().out_max_val();
  const float* in = x.cpu_data();
  float* out = top[0]->mutable_cpu_data();
  // Runs of `dim` values `stride` apart; `runs` of them.
  int dim, stride, runs;
  if (axis_ >= 0) {
    dim = x.shape(axis_);
    stride = x.count(axis_ + 1);
    runs = x.count() / std::max(dim, 1);
  } else {
    dim = x.count(1);
    stride = 1;
    runs = x.shape(0);
  }
  std::vector<std::pair<float, int>> v(dim);
  for (int r = 0; r < runs; ++r) {
    const size_t base = static_cast<size_t>(r / stride) * dim * stride + r % stride;
    for (int j = 0; j < dim; ++j) v[j] = {in[base + static_cast<size_t>(j) * stride], j};
    std::partial_sort(v.begin(), v.begin() + top_k_, v.end(),
                      std::greater<std::pair<float, int>>());
    for (int k = 0; k < top_k_; ++k) {
      if (axis_ >= 0) {
        const size_t o = static_cast<size_t>(r / stride) * top_k_ * stride +
                         static_cast<size_t>(k) * stride + r % stride;
        out[o] = values ? v[k].first : static_cast<float>(v[k].second);
      } else if (values) {
        out[static_cast<size_t>(r) * 2 * top_k_ + k] = static_cast<float>(v[k].second);
        out[static_cast<size_t>(r) * 2 * top_k_ + top_k_ + k] = v[k].first;
      } else {
        out[static_cast<size_t>(r) * top_k_ + k] = static_cast<float>(v[k].second);
      }
    }
  }
}

void ArgMaxLayer::Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                               const Blobs& bottom) {
  HS_REQUIRE(!propagate_down[0])
      << "layer '" << param_.name() << "' (ArgMax) has no gradient (nor has Caffe's) but "
      << "a gradient is asked of it; set propagate_down: false on it";
}

HS_REGISTER_LAYER(ArgMax, ArgMaxLayer);

}  // namespace hogstream
