// Sigmoid: values, saturation, gradient, in-place use.
#include "core/layers/sigmoid_layer.hpp"
#include "test/test_seed.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "test/core/gradient_checker.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

pb::LayerParameter SigmoidParam() {
  pb::LayerParameter p;
  p.set_type("Sigmoid");
  return p;
}

TEST(SigmoidLayerTest, ForwardMatchesDefinition) {
  std::mt19937 gen(::hogstream::TestSeed());
  Blob x(2, 3, 4, 5), y;
  test::FillGaussian(&x, gen, 0.f, 3.f);
  auto layer = CreateLayer(SigmoidParam());
  layer->SetUp({&x}, {&y});
  layer->Forward({&x}, {&y});
  ASSERT_EQ(y.shape(), x.shape());
  for (int i = 0; i < x.count(); ++i)
    EXPECT_NEAR(y.cpu_data()[i], 1.0 / (1.0 + std::exp(-double(x.cpu_data()[i]))), 1e-6);
}

TEST(SigmoidLayerTest, SaturatesWithoutOverflow) {
  Blob x(std::vector<int>{2}), y;
  x.mutable_cpu_data()[0] = -200.f;
  x.mutable_cpu_data()[1] = 200.f;
  SigmoidLayer layer(SigmoidParam());
  layer.SetUp({&x}, {&y});
  layer.Forward({&x}, {&y});
  EXPECT_EQ(y.cpu_data()[0], 0.f);
  EXPECT_EQ(y.cpu_data()[1], 1.f);
}

TEST(SigmoidLayerTest, Gradient) {
  std::mt19937 gen(::hogstream::TestSeed());
  Blob x(2, 3, 4, 5), y;
  test::FillGaussian(&x, gen, 0.f, 2.f);
  SigmoidLayer layer(SigmoidParam());
  layer.SetUp({&x}, {&y});
  test::CheckGradients(&layer, {&x}, {&y});
}

TEST(SigmoidLayerTest, InPlaceMatchesOutOfPlace) {
  std::mt19937 gen(::hogstream::TestSeed());
  Blob x(2, 3, 4, 5), y, z(2, 3, 4, 5);
  test::FillGaussian(&x, gen, 0.f, 2.f);
  std::copy_n(x.cpu_data(), x.count(), z.mutable_cpu_data());
  SigmoidLayer out(SigmoidParam()), in(SigmoidParam());
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

TEST(SigmoidLayerTest, RejectsTwoBottoms) {
  Blob a(2, 3, 1, 1), b(2, 3, 1, 1), y;
  SigmoidLayer layer(SigmoidParam());
  EXPECT_THROW(layer.SetUp({&a, &b}, {&y}), Error);
}

}  // namespace
}  // namespace hogstream
