#include "core/layers/inner_product_layer.hpp"
#include "test/test_seed.hpp"

#include <gtest/gtest.h>

#include "test/core/gradient_checker.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

pb::LayerParameter IPParam(int out, bool transpose, bool bias, int axis = 1) {
  pb::LayerParameter p;
  p.set_type("InnerProduct");
  auto* ip = p.mutable_inner_product_param();
  ip->set_num_output(out);
  ip->set_transpose(transpose);
  ip->set_bias_term(bias);
  ip->set_axis(axis);
  ip->mutable_weight_filler()->set_type("gaussian");
  ip->mutable_bias_filler()->set_type("gaussian");
  return p;
}

class InnerProductLayerTest : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(InnerProductLayerTest, ForwardAndGradient) {
  const auto [transpose, bias] = GetParam();
  std::mt19937 gen(::hogstream::TestSeed());
  Context::Get().set_seed(gen());
  Blob x(3, 2, 3, 2), y;
  test::FillGaussian(&x, gen);
  InnerProductLayer layer(IPParam(5, transpose, bias));
  layer.SetUp({&x}, {&y});
  ASSERT_EQ(y.shape(), (std::vector<int>{3, 5}));
  layer.Forward({&x}, {&y});
  const Blob& w = *layer.blobs()[0];
  for (int n = 0; n < 3; ++n)
    for (int o = 0; o < 5; ++o) {
      double s = bias ? layer.blobs()[1]->cpu_data()[o] : 0.0;
      for (int k = 0; k < 12; ++k)
        s += x.cpu_data()[n * 12 + k] * (transpose ? w.cpu_data()[k * 5 + o] : w.cpu_data()[o * 12 + k]);
      EXPECT_NEAR(y.cpu_data()[n * 5 + o], s, 1e-4 * std::max(1.0, std::fabs(s)));
    }
  test::CheckGradients(&layer, {&x}, {&y});
}

INSTANTIATE_TEST_SUITE_P(Options, InnerProductLayerTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()));

TEST(InnerProductLayer, AxisKeepsLeadingDims) {
  std::mt19937 gen(::hogstream::TestSeed());
  Blob x(std::vector<int>{2, 3, 4}), y;
  test::FillGaussian(&x, gen);
  InnerProductLayer layer(IPParam(6, false, true, 2));
  layer.SetUp({&x}, {&y});
  EXPECT_EQ(y.shape(), (std::vector<int>{2, 3, 6}));
  EXPECT_EQ(layer.blobs()[0]->shape(), (std::vector<int>{6, 4}));
  test::CheckGradients(&layer, {&x}, {&y});
}

TEST(InnerProductLayer, FeatureMismatchIsAnError) {
  Blob x(2, 3, 4, 4), y, other(2, 3, 5, 5);
  InnerProductLayer layer(IPParam(6, false, true));
  layer.SetUp({&x}, {&y});
  EXPECT_THROW(layer.Forward({&other}, {&y}), Error);
}

}  // namespace
}  // namespace hogstream
