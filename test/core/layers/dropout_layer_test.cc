// Dropout: TRAIN keeps and rescales units at the configured rate and backward follows the
// mask, draws repeat under the same Context seed, TEST is the identity, numerical gradient
// in TRAIN, and ratio errors.
#include "core/layers/dropout_layer.hpp"
#include "test/test_seed.hpp"

#include <gtest/gtest.h>

#include "core/context.hpp"
#include "core/math.hpp"
#include "test/core/gradient_checker.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

pb::LayerParameter Param(pb::Phase phase, float ratio) {
  pb::LayerParameter p;
  p.set_type("Dropout");
  p.set_phase(phase);
  p.mutable_dropout_param()->set_dropout_ratio(ratio);
  return p;
}

class DropoutRatioTest : public ::testing::TestWithParam<float> {};

TEST_P(DropoutRatioTest, TrainKeepsRescalesAndBackpropagatesThroughMask) {
  const float ratio = GetParam();
  std::mt19937 gen(::hogstream::TestSeed());
  Blob x(10, 20, 5, 10), y;
  test::FillUniform(&x, gen, 0.5f, 2.f);  // never zero, so zeros in y mark drops
  auto layer = CreateLayer(Param(pb::TRAIN, ratio));
  layer->SetUp({&x}, {&y});
  Context::Get().set_seed(::hogstream::TestSeed());
  layer->Forward({&x}, {&y});
  int dropped = 0;
  for (int i = 0; i < x.count(); ++i) {
    if (y.cpu_data()[i] == 0.f) {
      ++dropped;
    } else {
      EXPECT_FLOAT_EQ(y.cpu_data()[i], x.cpu_data()[i] / (1.f - ratio)) << i;
    }
  }
  EXPECT_NEAR(static_cast<double>(dropped) / x.count(), ratio, 0.03);

  Blob dy(10, 20, 5, 10);
  test::FillGaussian(&dy, gen);
  copy(dy.count(), dy.cpu_data(), y.mutable_cpu_diff());
  layer->Backward({&y}, {true}, {&x});
  for (int i = 0; i < x.count(); ++i) {
    const float want = y.cpu_data()[i] == 0.f ? 0.f : dy.cpu_data()[i] / (1.f - ratio);
    EXPECT_FLOAT_EQ(x.cpu_diff()[i], want) << i;
  }
}

TEST_P(DropoutRatioTest, GradientInTrain) {
  std::mt19937 gen(::hogstream::TestSeed());
  Blob x(2, 3, 4, 5), y;
  test::FillGaussian(&x, gen);
  DropoutLayer layer(Param(pb::TRAIN, GetParam()));
  layer.SetUp({&x}, {&y});
  test::CheckGradients(&layer, {&x}, {&y});
}

INSTANTIATE_TEST_SUITE_P(Ratios, DropoutRatioTest, ::testing::Values(0.5f, 0.2f, 0.8f));

TEST(DropoutLayerTest, SameSeedSameMask) {
  std::mt19937 gen(::hogstream::TestSeed());
  Blob x({4, 50}), y1, y2;
  test::FillUniform(&x, gen, 0.5f, 2.f);
  auto layer = CreateLayer(Param(pb::TRAIN, 0.5f));
  layer->SetUp({&x}, {&y1});
  const uint64_t seed = ::hogstream::TestSeed();
  Context::Get().set_seed(seed);
  layer->Forward({&x}, {&y1});
  Context::Get().set_seed(seed);
  layer->Forward({&x}, {&y2});
  for (int i = 0; i < x.count(); ++i) EXPECT_EQ(y1.cpu_data()[i], y2.cpu_data()[i]);
}

TEST(DropoutLayerTest, TestPhaseIsIdentity) {
  std::mt19937 gen(::hogstream::TestSeed());
  Blob x(3, 4, 5, 2), y;
  test::FillGaussian(&x, gen);
  auto layer = CreateLayer(Param(pb::TEST, 0.5f));
  layer->SetUp({&x}, {&y});
  layer->Forward({&x}, {&y});
  test::FillGaussian(&y, gen);
  copy(y.count(), y.cpu_data(), y.mutable_cpu_diff());
  Blob before;
  before.ReshapeLike(x);
  copy(x.count(), x.cpu_data(), before.mutable_cpu_data());
  layer->Forward({&x}, {&y});
  layer->Backward({&y}, {true}, {&x});
  for (int i = 0; i < x.count(); ++i) {
    EXPECT_EQ(y.cpu_data()[i], before.cpu_data()[i]);
    EXPECT_EQ(x.cpu_diff()[i], y.cpu_diff()[i]);
  }
  // In place, TEST leaves the data untouched.
  layer->Forward({&x}, {&x});
  for (int i = 0; i < x.count(); ++i) EXPECT_EQ(x.cpu_data()[i], before.cpu_data()[i]);
}

TEST(DropoutLayerTest, BadRatioIsAnError) {
  Blob x({2, 3}), y;
  for (float r : {1.f, 1.5f, -0.1f}) {
    auto layer = CreateLayer(Param(pb::TRAIN, r));
    EXPECT_THROW(layer->SetUp({&x}, {&y}), Error) << r;
  }
}

}  // namespace
}  // namespace hogstream
