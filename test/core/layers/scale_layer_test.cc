// Scale: forward against a broadcast reference for learned and bottom[1] scales (with and
// without bias, over several axes), default fillers, in-place use, numerical gradients for
// bottom, scale and bias, and shape errors.
#include "core/layers/scale_layer.hpp"
#include "test/test_seed.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "core/math.hpp"
#include "test/core/gradient_checker.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

struct Config {
  int axis;
  int num_axes;                        // learned scale only
  std::vector<int> bottom_scale = {};  // non-empty: the scale is bottom[1] of this shape...
  bool scalar_bottom = false;          // ...or a scalar bottom[1]
  bool bias = false;
};

pb::LayerParameter Param(const Config& c) {
  pb::LayerParameter p;
  p.set_type("Scale");
  p.mutable_scale_param()->set_axis(c.axis);
  p.mutable_scale_param()->set_num_axes(c.num_axes);
  p.mutable_scale_param()->set_bias_term(c.bias);
  p.mutable_scale_param()->mutable_filler()->set_type("gaussian");
  p.mutable_scale_param()->mutable_bias_filler()->set_type("uniform");
  p.mutable_scale_param()->mutable_bias_filler()->set_min(-1.f);
  return p;
}

bool TwoBottoms(const Config& c) { return !c.bottom_scale.empty() || c.scalar_bottom; }

class ScaleConfigTest : public ::testing::TestWithParam<Config> {
 protected:
  void SetUp() override {
    const Config c = GetParam();
    x_.Reshape({2, 3, 4, 5});
    test::FillGaussian(&x_, gen_);
    bottoms_ = {&x_};
    if (TwoBottoms(c)) {
      s_.Reshape(c.bottom_scale);  // empty shape: a scalar
      test::FillGaussian(&s_, gen_);
      bottoms_.push_back(&s_);
    }
  }
  std::mt19937 gen_{::hogstream::TestSeed()};
  Blob x_, s_, y_;
  Blobs bottoms_;
};

TEST_P(ScaleConfigTest, ForwardMatchesReference) {
  const Config c = GetParam();
  auto layer = CreateLayer(Param(c));
  layer->SetUp(bottoms_, {&y_});
  layer->Forward(bottoms_, {&y_});
  ASSERT_EQ(y_.shape(), x_.shape());
  const Blob& s = TwoBottoms(c) ? s_ : *layer->blobs()[0];
  const float* b = c.bias ? layer->blobs().back()->cpu_data() : nullptr;
  ASSERT_EQ(layer->blobs().size(), (TwoBottoms(c) ? 0u : 1u) + (c.bias ? 1u : 0u));
  const int axis = s.num_axes() == 0 ? 0 : x_.CanonicalAxisIndex(c.axis);
  const int inner = x_.count(axis + s.num_axes()), dim = s.count();
  for (int i = 0; i < x_.count(); ++i) {
    const int d = (i / inner) % dim;
    const float want = x_.cpu_data()[i] * s.cpu_data()[d] + (b ? b[d] : 0.f);
    EXPECT_NEAR(y_.cpu_data()[i], want, 1e-6f * std::max(1.f, std::fabs(want))) << i;
  }
}

TEST_P(ScaleConfigTest, Gradient) {
  ScaleLayer layer(Param(GetParam()));
  layer.SetUp(bottoms_, {&y_});
  test::CheckGradients(&layer, bottoms_, {&y_});
}

INSTANTIATE_TEST_SUITE_P(
    Configs, ScaleConfigTest,
    ::testing::Values(Config{1, 1}, Config{1, 1, {}, false, true}, Config{1, -1},
                      Config{0, 2, {}, false, true}, Config{-1, 1}, Config{2, 0},
                      Config{1, 0, {}, false, true}, Config{1, 1, {3, 4}},
                      Config{1, 1, {3, 4}, false, true}, Config{0, 1, {2}, false, true},
                      Config{-2, 1, {4, 5}}, Config{1, 1, {}, true},
                      Config{1, 1, {}, true, true}));

TEST(ScaleLayerTest, DefaultFillersGiveIdentity) {
  std::mt19937 gen(::hogstream::TestSeed());
  Blob x(2, 3, 2, 2), y;
  test::FillGaussian(&x, gen);
  pb::LayerParameter p;
  p.set_type("Scale");
  p.mutable_scale_param()->set_bias_term(true);
  auto layer = CreateLayer(p);
  layer->SetUp({&x}, {&y});
  ASSERT_EQ(layer->blobs().size(), 2u);
  EXPECT_EQ(layer->blobs()[0]->shape(), std::vector<int>{3});
  EXPECT_EQ(layer->blobs()[1]->shape(), std::vector<int>{3});
  layer->Forward({&x}, {&y});
  for (int i = 0; i < x.count(); ++i) EXPECT_EQ(y.cpu_data()[i], x.cpu_data()[i]);
}

TEST(ScaleLayerTest, InPlaceMatchesOutOfPlace) {
  std::mt19937 gen(::hogstream::TestSeed());
  Blob x(2, 3, 4, 2), y, inplace, dy(2, 3, 4, 2);
  test::FillGaussian(&x, gen);
  test::FillGaussian(&dy, gen);
  inplace.ReshapeLike(x);
  copy(x.count(), x.cpu_data(), inplace.mutable_cpu_data());
  Config c{1, 2, {}, false, true};
  ScaleLayer a(Param(c)), b(Param(c));
  a.SetUp({&x}, {&y});
  b.SetUp({&inplace}, {&inplace});
  for (int i = 0; i < 2; ++i) {
    copy(a.blobs()[i]->count(), a.blobs()[i]->cpu_data(), b.blobs()[i]->mutable_cpu_data());
    set(a.blobs()[i]->count(), 0.f, a.blobs()[i]->mutable_cpu_diff());
    set(b.blobs()[i]->count(), 0.f, b.blobs()[i]->mutable_cpu_diff());
  }
  a.Forward({&x}, {&y});
  b.Forward({&inplace}, {&inplace});
  copy(dy.count(), dy.cpu_data(), y.mutable_cpu_diff());
  copy(dy.count(), dy.cpu_data(), inplace.mutable_cpu_diff());
  a.Backward({&y}, {true}, {&x});
  b.Backward({&inplace}, {true}, {&inplace});
  for (int i = 0; i < x.count(); ++i) {
    EXPECT_FLOAT_EQ(inplace.cpu_data()[i], y.cpu_data()[i]);
    EXPECT_FLOAT_EQ(inplace.cpu_diff()[i], x.cpu_diff()[i]);
  }
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < a.blobs()[i]->count(); ++j)
      EXPECT_FLOAT_EQ(b.blobs()[i]->cpu_diff()[j], a.blobs()[i]->cpu_diff()[j]);
}

// The one-pass backward (bias and scale gradients in double lanes, dx in the same loop) and
// the forward that keeps the input in the same loop, on blocks longer than a lane block
// (inner 63 and 100) and of length 1: against direct loops, in place and not.
TEST(ScaleLayerTest, LongBlocksMatchDirectLoops) {
  std::mt19937 gen(::hogstream::TestSeed());
  const std::vector<std::vector<int>> shapes{{3, 5, 7, 9}, {2, 4, 10, 10}, {40, 6}};
  for (const auto& shape : shapes) {
    for (int in_place = 0; in_place < 2; ++in_place) {
      Blob x(shape), y, dy(shape), saved_x(shape);
      test::FillGaussian(&x, gen);
      test::FillGaussian(&dy, gen);
      copy(x.count(), x.cpu_data(), saved_x.mutable_cpu_data());
      ScaleLayer layer(Param(Config{1, 1, {}, false, true}));
      Blob* top = in_place ? &x : &y;
      layer.SetUp({&x}, {top});
      const int ch = shape[1], inner = x.count() / (shape[0] * ch);
      const float* s = layer.blobs()[0]->cpu_data();
      const float* b = layer.blobs()[1]->cpu_data();
      layer.Forward({&x}, {top});
      for (int i = 0; i < x.count(); ++i) {
        const int c = i / inner % ch;
        ASSERT_FLOAT_EQ(top->cpu_data()[i], saved_x.cpu_data()[i] * s[c] + b[c]) << i;
      }
      std::vector<double> ds(ch, 0), db(ch, 0);
      for (int i = 0; i < x.count(); ++i) {
        const int c = i / inner % ch;
        ds[c] += static_cast<double>(dy.cpu_data()[i]) * saved_x.cpu_data()[i];
        db[c] += dy.cpu_data()[i];
      }
      for (int i = 0; i < 2; ++i) {
        set(layer.blobs()[i]->count(), 0.5f, layer.blobs()[i]->mutable_cpu_diff());
      }
      copy(dy.count(), dy.cpu_data(), top->mutable_cpu_diff());
      layer.Backward({top}, {true}, {&x});
      for (int c = 0; c < ch; ++c) {  // accumulated onto the 0.5 already there
        EXPECT_NEAR(layer.blobs()[0]->cpu_diff()[c], 0.5 + ds[c], 1e-4 * (1 + std::fabs(ds[c])));
        EXPECT_NEAR(layer.blobs()[1]->cpu_diff()[c], 0.5 + db[c], 1e-4 * (1 + std::fabs(db[c])));
      }
      for (int i = 0; i < x.count(); ++i) {
        ASSERT_FLOAT_EQ(x.cpu_diff()[i], dy.cpu_data()[i] * s[i / inner % ch]) << i;
      }
    }
  }
}

TEST(ScaleLayerTest, BadShapesAreErrors) {
  Blob x(2, 3, 4, 5), y;
  auto expect_error = [&](const Config& c, Blob* second = nullptr) {
    auto layer = CreateLayer(Param(c));
    Blobs bottoms{&x};
    if (second) bottoms.push_back(second);
    EXPECT_THROW(layer->SetUp(bottoms, {&y}), Error);
  };
  expect_error(Config{2, 3});   // past the last axis
  expect_error(Config{4, 1});   // axis out of range
  expect_error(Config{-5, 1});
  expect_error(Config{1, -2});  // num_axes below -1
  Blob wrong({3, 5});
  expect_error(Config{1, 1}, &wrong);
  Blob too_long({4, 5, 2});
  expect_error(Config{2, 1}, &too_long);
}

}  // namespace
}  // namespace hogstream
