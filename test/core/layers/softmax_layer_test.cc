// Softmax: values against a double reference on several axes, stability, gradient.
#include "core/layers/softmax_layer.hpp"
#include "test/test_seed.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "test/core/gradient_checker.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

pb::LayerParameter SoftmaxParam(int axis) {
  pb::LayerParameter p;
  p.set_type("Softmax");
  p.mutable_softmax_param()->set_axis(axis);
  return p;
}

// Softmax of x over `axis`, computed naively in double.
std::vector<double> Reference(const Blob& x, int axis) {
  const int a = x.CanonicalAxisIndex(axis);
  const int outer = x.count(0, a), channels = x.shape(a), inner = x.count(a + 1);
  std::vector<double> y(x.count());
  for (int o = 0; o < outer; ++o)
    for (int i = 0; i < inner; ++i) {
      auto at = [&](int c) { return (o * channels + c) * inner + i; };
      double mx = -INFINITY, sum = 0;
      for (int c = 0; c < channels; ++c) mx = std::max(mx, double(x.cpu_data()[at(c)]));
      for (int c = 0; c < channels; ++c) sum += std::exp(x.cpu_data()[at(c)] - mx);
      for (int c = 0; c < channels; ++c) y[at(c)] = std::exp(x.cpu_data()[at(c)] - mx) / sum;
    }
  return y;
}

class SoftmaxLayerTest : public ::testing::TestWithParam<int> {};

TEST_P(SoftmaxLayerTest, ForwardMatchesReference) {
  std::mt19937 gen(::hogstream::TestSeed());
  Blob x(2, 5, 3, 4), y;
  test::FillGaussian(&x, gen, 0.f, 3.f);
  auto layer = CreateLayer(SoftmaxParam(GetParam()));
  layer->SetUp({&x}, {&y});
  layer->Forward({&x}, {&y});
  ASSERT_EQ(y.shape(), x.shape());
  const auto ref = Reference(x, GetParam());
  for (int i = 0; i < x.count(); ++i) EXPECT_NEAR(y.cpu_data()[i], ref[i], 1e-6);
}

TEST_P(SoftmaxLayerTest, LargeScoresStayFinite) {
  std::mt19937 gen(::hogstream::TestSeed());
  Blob x(2, 5, 3, 4), y;
  test::FillGaussian(&x, gen, 500.f, 100.f);
  SoftmaxLayer layer(SoftmaxParam(GetParam()));
  layer.SetUp({&x}, {&y});
  layer.Forward({&x}, {&y});
  const auto ref = Reference(x, GetParam());
  for (int i = 0; i < x.count(); ++i) {
    ASSERT_TRUE(std::isfinite(y.cpu_data()[i]));
    EXPECT_NEAR(y.cpu_data()[i], ref[i], 1e-6);
  }
}

TEST_P(SoftmaxLayerTest, Gradient) {
  std::mt19937 gen(::hogstream::TestSeed());
  Blob x(2, 5, 3, 4), y;
  test::FillGaussian(&x, gen);
  SoftmaxLayer layer(SoftmaxParam(GetParam()));
  layer.SetUp({&x}, {&y});
  test::CheckGradients(&layer, {&x}, {&y});
}

TEST_P(SoftmaxLayerTest, InPlaceMatchesOutOfPlace) {
  std::mt19937 gen(::hogstream::TestSeed());
  Blob x(2, 5, 3, 4), y, z(2, 5, 3, 4);
  test::FillGaussian(&x, gen);
  std::copy_n(x.cpu_data(), x.count(), z.mutable_cpu_data());
  SoftmaxLayer out(SoftmaxParam(GetParam())), in(SoftmaxParam(GetParam()));
  out.SetUp({&x}, {&y});
  in.SetUp({&z}, {&z});
  out.Forward({&x}, {&y});
  in.Forward({&z}, {&z});
  std::normal_distribution<float> nd;
  for (int i = 0; i < y.count(); ++i) y.mutable_cpu_diff()[i] = z.mutable_cpu_diff()[i] = nd(gen);
  out.Backward({&y}, {true}, {&x});
  in.Backward({&z}, {true}, {&z});
  for (int i = 0; i < x.count(); ++i) {
    EXPECT_FLOAT_EQ(z.cpu_data()[i], y.cpu_data()[i]);
    EXPECT_FLOAT_EQ(z.cpu_diff()[i], x.cpu_diff()[i]);
  }
}

INSTANTIATE_TEST_SUITE_P(Axes, SoftmaxLayerTest, ::testing::Values(1, 0, 3, -1, -3));

TEST(SoftmaxLayerErrorsTest, AxisOutOfRange) {
  Blob x(2, 5, 3, 4), y;
  EXPECT_THROW(SoftmaxLayer(SoftmaxParam(4)).SetUp({&x}, {&y}), Error);
  EXPECT_THROW(SoftmaxLayer(SoftmaxParam(-5)).SetUp({&x}, {&y}), Error);
}

}  // namespace
}  // namespace hogstream
