// Numerical gradient check for layers: compares Backward's analytic gradients with central
// differences of Forward, for every bottom element and every learnable parameter.
//
// The objective is L = sum_t sum_i r_ti * top_ti with fresh random weights r (never all ones,
// so a gradient that ignores position or sign is caught). Before each Forward the thread's
// RNG is reseeded, so layers that draw random numbers (Dropout) see the same draws every time.
// Points within `kink_range` of a non-differentiable `kink` (ReLU at 0, max ties) are skipped
// when the check says where its kinks are.
#pragma once

#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/blob.hpp"
#include "core/context.hpp"
#include "core/layer.hpp"
#include "core/net.hpp"
#include "test/test_seed.hpp"

namespace hogstream::test {

struct GradientCheck {
  float step = 1e-2f;
  float threshold = 1e-2f;   // |analytic - numeric| <= threshold * max(1, |a|, |n|)
  bool has_kink = false;
  float kink = 0.f;
  float kink_range = -1.f;
  uint64_t seed = 1701;
  // Bottoms to check (empty = all); labels and other integer inputs are left out this way.
  std::vector<int> check_bottoms;
  bool check_params = true;
};

// Fills a blob with values from N(mean, std) drawn from `gen`.
inline void FillGaussian(Blob* b, std::mt19937& gen, float mean = 0.f, float std = 1.f) {
  std::normal_distribution<float> d(mean, std);
  float* p = b->mutable_cpu_data();
  for (int i = 0; i < b->count(); ++i) p[i] = d(gen);
}
inline void FillUniform(Blob* b, std::mt19937& gen, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  float* p = b->mutable_cpu_data();
  for (int i = 0; i < b->count(); ++i) p[i] = d(gen);
}

// A layer parameter from prototxt text (named "l" when the text gives no name); text that does
// not parse is the test's own mistake.
inline pb::LayerParameter LayerText(const std::string& text) {
  pb::LayerParameter p;
  HS_CHECK(google::protobuf::TextFormat::ParseFromString(text, &p)) << text;
  if (p.name().empty()) p.set_name("l");
  return p;
}

// A layer test's blobs, owned by the fixture: random bottoms (N(0, 1) from the test's seed)
// and empty tops.
class LayerTest : public ::testing::Test {
 public:
  Blob* Random(const std::vector<int>& shape) {
    blobs_.push_back(std::make_unique<Blob>(shape));
    FillGaussian(blobs_.back().get(), gen_);
    return blobs_.back().get();
  }
  Blob* Empty() {
    blobs_.push_back(std::make_unique<Blob>());
    return blobs_.back().get();
  }
  std::mt19937 gen_{::hogstream::TestSeed()};
  std::vector<std::unique_ptr<Blob>> blobs_;
};

// The layer must already be SetUp with these bottoms and tops.
inline void CheckGradients(Layer* layer, const Blobs& bottom, const Blobs& top,
                           const GradientCheck& opt = {}) {
  std::mt19937 gen(opt.seed);
  std::vector<std::vector<double>> weights(top.size());
  auto objective = [&]() {
    Context::Get().set_seed(opt.seed + 7);
    layer->Forward(bottom, top);
    double l = 0;
    for (size_t t = 0; t < top.size(); ++t) {
      const float* d = top[t]->cpu_data();
      for (int i = 0; i < top[t]->count(); ++i) l += weights[t][i] * d[i];
    }
    return l;
  };

  std::vector<Blob*> targets;
  std::vector<std::string> names;
  std::vector<bool> prop(bottom.size(), false);
  for (size_t b = 0; b < bottom.size(); ++b) {
    bool want = opt.check_bottoms.empty();
    for (int c : opt.check_bottoms) want |= (c == static_cast<int>(b));
    if (!want) continue;
    prop[b] = true;
    targets.push_back(bottom[b]);
    names.push_back("bottom " + std::to_string(b));
  }
  if (opt.check_params) {
    for (size_t p = 0; p < layer->blobs().size(); ++p) {
      if (!layer->param_propagate_down(static_cast<int>(p))) continue;
      targets.push_back(layer->blobs()[p].get());
      names.push_back("param " + std::to_string(p));
    }
  }
  // Analytic gradients. Targets are cleared before the top gradients are written: a layer
  // may share one diff buffer between top and bottom (Reshape).
  for (Blob* b : targets) std::fill_n(b->mutable_cpu_diff(), b->count(), 0.f);
  Context::Get().set_seed(opt.seed + 7);
  layer->Forward(bottom, top);
  std::normal_distribution<double> nd(0.0, 1.0);
  for (size_t t = 0; t < top.size(); ++t) {
    weights[t].resize(top[t]->count());
    float* diff = top[t]->mutable_cpu_diff();
    for (int i = 0; i < top[t]->count(); ++i) diff[i] = static_cast<float>(weights[t][i] = nd(gen));
  }
  layer->Backward(top, prop, bottom);
  std::vector<std::vector<float>> analytic;
  for (Blob* b : targets) analytic.emplace_back(b->cpu_diff(), b->cpu_diff() + b->count());

  // Numeric gradients, element by element.
  ASSERT_FALSE(targets.empty()) << "nothing to check";
  for (size_t k = 0; k < targets.size(); ++k) {
    Blob* b = targets[k];
    for (int i = 0; i < b->count(); ++i) {
      float* x = b->mutable_cpu_data() + i;
      const float orig = *x;
      if (opt.has_kink && std::fabs(orig - opt.kink) <= opt.kink_range) continue;
      *x = orig + opt.step;
      const double lp = objective();
      x = b->mutable_cpu_data() + i;
      *x = orig - opt.step;
      const double lm = objective();
      x = b->mutable_cpu_data() + i;
      *x = orig;
      const double numeric = (lp - lm) / (2.0 * opt.step);
      const double a = analytic[k][i];
      const double scale = std::max({1.0, std::fabs(a), std::fabs(numeric)});
      ASSERT_NEAR(a, numeric, opt.threshold * scale)
          << layer->type() << " " << names[k] << " element " << i << " of "
          << b->shape_string();
    }
  }
}

// A whole net's parameter gradients (Backward after ForwardBackward, the loss weights included)
// against central differences of Forward with step h, every `stride`-th element of each
// learnable blob, within 2e-2 * max(1, |a|, |n|). The net's inputs are set by the caller.
// Returns how many elements were checked; `what` goes into the failure messages.
inline int ExpectNetGradientMatchesNumeric(Net& net, float h, int stride, const std::string& what = "") {
  net.ClearParamDiffs();
  net.ForwardBackward();
  const std::vector<float> analytic(net.param_diff(), net.param_diff() + net.param_buffer_size());
  int checked = 0;
  for (size_t p = 0; p < net.learnable_params().size(); ++p) {
    Blob* b = net.learnable_params()[p];
    for (int i = 0; i < b->count(); i += stride) {
      float* x = b->mutable_cpu_data() + i;
      const float orig = *x;
      *x = orig + h;
      const double lp = net.Forward();
      *x = orig - h;
      const double lm = net.Forward();
      *x = orig;
      const double numeric = (lp - lm) / (2 * h);
      const double a = analytic[net.learnable_offsets()[p] + i];
      EXPECT_NEAR(a, numeric, 2e-2 * std::max({1.0, std::fabs(a), std::fabs(numeric)}))
          << "param " << p << " element " << i << what;
      ++checked;
    }
  }
  return checked;
}

}  // namespace hogstream::test
