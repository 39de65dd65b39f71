// PReLU layer, CPU forward and backward.
#include "core/layers/prelu_layer.hpp"

#include <vector>

#include "core/filler.hpp"

namespace hogstream {

void PReLULayer::LayerSetUp(const Blobs& bottom, const Blobs& top) {
  const pb::PReLUParameter& p = param_.prelu_param();
  const Blob& x = *bottom[0];
  HS_REQUIRE(x.num_axes() >= 2) << "PReLU needs an input of at least 2 axes (its channels are "
                                << "axis 1); got " << x.shape_string();
  shared_ = p.channel_shared();
  blobs_.push_back(std::make_shared<Blob>(shared_ ? std::vector<int>{}
                                                  : std::vector<int>{x.shape(1)}));
  pb::FillerParameter filler = p.filler();
  if (!p.has_filler()) {
    filler.set_type("constant");
    filler.set_value(0.25f);
  }
  Fill(filler, blobs_[0].get());
  set_param_propagate_down(0, true);
}

void PReLULayer::Reshape(const Blobs& bottom, const Blobs& top) {
  const Blob& x = *bottom[0];
  HS_REQUIRE(x.num_axes() >= 2) << "PReLU needs an input of at least 2 axes (its channels are "
                                << "axis 1); got " << x.shape_string();
  HS_REQUIRE(shared_ || x.shape(1) == blobs_[0]->count())
      << "PReLU has " << blobs_[0]->count() << " slopes but input " << x.shape_string()
      << " has " << x.shape(1) << " channels";
  outer_ = x.shape(0);
  channels_ = x.shape(1);
  inner_ = x.count(2);
  InputKeepingNeuronLayer::Reshape(bottom, top);
}

void PReLULayer::Forward_cpu(const Blobs& bottom, const Blobs& top) {
  const float* x = KeepInput(bottom, top);
  const float* a = blobs_[0]->cpu_data();
  float* y = top[0]->mutable_cpu_data();
  for (int o = 0; o < outer_; ++o) {
    for (int c = 0; c < channels_; ++c) {
      const size_t off = (static_cast<size_t>(o) * channels_ + c) * inner_;
      const float slope = a[shared_ ? 0 : c];
      for (int i = 0; i < inner_; ++i) {
        const float v = x[off + i];
        y[off + i] = v > 0.f ? v : slope * v;
      }
    }
  }
}

// da_c += sum of dy * x where x <= 0 (accumulated: the solver clears parameter diffs);
// dx = dy where x > 0, a_c * dy otherwise. Each dy is read before its dx is written (in place
// they are one buffer).
void PReLULayer::Backward_cpu(const Blobs& top, const std::vector<bool>& propagate_down,
                              const Blobs& bottom) {
  const bool want_da = param_propagate_down(0), want_dx = propagate_down[0];
  if (!want_da && !want_dx) return;
  const float* x = KeptInput(top, bottom);
  const float* a = blobs_[0]->cpu_data();
  const float* dy = top[0]->cpu_diff();
  float* dx = want_dx ? bottom[0]->mutable_cpu_diff() : nullptr;
  std::vector<double> da(shared_ ? 1 : channels_, 0.0);
  for (int o = 0; o < outer_; ++o) {
    for (int c = 0; c < channels_; ++c) {
      const size_t off = (static_cast<size_t>(o) * channels_ + c) * inner_;
      const int k = shared_ ? 0 : c;
      const float slope = a[k];
      double sum = 0;
      for (int i = 0; i < inner_; ++i) {
        const float v = x[off + i], g = dy[off + i];
        if (v <= 0.f) sum += static_cast<double>(g) * v;
        if (dx) dx[off + i] = v > 0.f ? g : slope * g;
      }
      da[k] += sum;
    }
  }
  if (want_da) {
    float* d = blobs_[0]->mutable_cpu_diff();
    for (size_t k = 0; k < da.size(); ++k) d[k] += static_cast<float>(da[k]);
  }
}

HS_REGISTER_LAYER(PReLU, PReLULayer);

}  // namespace hogstream
