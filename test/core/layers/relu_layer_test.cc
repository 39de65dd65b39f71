#include "core/layers/relu_layer.hpp"
#include "test/test_seed.hpp"

#include <gtest/gtest.h>

#include "test/core/gradient_checker.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

class ReLULayerTest : public ::testing::TestWithParam<float> {};

TEST_P(ReLULayerTest, ForwardMatchesDefinition) {
  std::mt19937 gen(::hogstream::TestSeed());
  Blob x(2, 3, 4, 5), y;
  test::FillGaussian(&x, gen);
  pb::LayerParameter p;
  p.set_type("ReLU");
  p.mutable_relu_param()->set_negative_slope(GetParam());
  auto layer = CreateLayer(p);
  layer->SetUp({&x}, {&y});
  layer->Forward({&x}, {&y});
  ASSERT_EQ(y.shape(), x.shape());
  for (int i = 0; i < x.count(); ++i) {
    const float v = x.cpu_data()[i];
    EXPECT_FLOAT_EQ(y.cpu_data()[i], v > 0 ? v : GetParam() * v);
  }
}

TEST_P(ReLULayerTest, Gradient) {
  std::mt19937 gen(::hogstream::TestSeed());
  Blob x(2, 3, 4, 5), y;
  test::FillGaussian(&x, gen);
  pb::LayerParameter p;
  p.set_type("ReLU");
  p.mutable_relu_param()->set_negative_slope(GetParam());
  ReLULayer layer(p);
  layer.SetUp({&x}, {&y});
  test::GradientCheck opt;
  opt.has_kink = true;
  opt.kink_range = 0.02f;
  test::CheckGradients(&layer, {&x}, {&y}, opt);
}

INSTANTIATE_TEST_SUITE_P(Slopes, ReLULayerTest, ::testing::Values(0.f, 0.1f));

}  // namespace
}  // namespace hogstream
