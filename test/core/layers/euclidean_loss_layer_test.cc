// EuclideanLoss: value, gradients to both bottoms, loss weight, bad shapes.
#include "core/layers/euclidean_loss_layer.hpp"
#include "test/test_seed.hpp"

#include <gtest/gtest.h>

#include "test/core/gradient_checker.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

pb::LayerParameter EuclideanParam(float loss_weight = 0.f) {
  pb::LayerParameter p;
  p.set_type("EuclideanLoss");
  if (loss_weight != 0.f) p.add_loss_weight(loss_weight);
  return p;
}

double Reference(const Blob& a, const Blob& b) {
  double sum = 0;
  for (int i = 0; i < a.count(); ++i) {
    const double d = double(a.cpu_data()[i]) - b.cpu_data()[i];
    sum += d * d;
  }
  return sum / (2.0 * a.shape(0));
}

class EuclideanLossLayerTest : public ::testing::Test {
 protected:
  EuclideanLossLayerTest() : gen_(::hogstream::TestSeed()), a_(5, 3, 2, 2), b_(5, 12, 1, 1) {
    test::FillGaussian(&a_, gen_);
    test::FillGaussian(&b_, gen_);
  }
  std::mt19937 gen_;
  Blob a_, b_, loss_;
};

TEST_F(EuclideanLossLayerTest, ForwardMatchesReference) {
  auto layer = CreateLayer(EuclideanParam());
  layer->SetUp({&a_, &b_}, {&loss_});
  EXPECT_EQ(loss_.num_axes(), 0);
  const float returned = layer->Forward({&a_, &b_}, {&loss_});
  const double ref = Reference(a_, b_);
  EXPECT_NEAR(loss_.cpu_data()[0], ref, 1e-5 * ref);
  EXPECT_FLOAT_EQ(returned, loss_.cpu_data()[0]);
}

TEST_F(EuclideanLossLayerTest, GradientToBothBottoms) {
  EuclideanLossLayer layer(EuclideanParam());
  layer.SetUp({&a_, &b_}, {&loss_});
  test::CheckGradients(&layer, {&a_, &b_}, {&loss_});
}

TEST_F(EuclideanLossLayerTest, LossWeight) {
  const float w = std::uniform_real_distribution<float>(0.5f, 4.f)(gen_);
  EuclideanLossLayer layer(EuclideanParam(w));
  layer.SetUp({&a_, &b_}, {&loss_});
  const float returned = layer.Forward({&a_, &b_}, {&loss_});
  EXPECT_NEAR(returned, w * Reference(a_, b_), 1e-5 * returned);
  layer.Backward({&loss_}, {true, true}, {&a_, &b_});
  for (int i = 0; i < a_.count(); ++i) {
    const double g = w * (double(a_.cpu_data()[i]) - b_.cpu_data()[i]) / a_.shape(0);
    EXPECT_NEAR(a_.cpu_diff()[i], g, 1e-5);
    EXPECT_NEAR(b_.cpu_diff()[i], -g, 1e-5);
  }
  test::CheckGradients(&layer, {&a_, &b_}, {&loss_});
}

TEST_F(EuclideanLossLayerTest, Contract) {
  EuclideanLossLayer layer(EuclideanParam());
  EXPECT_TRUE(layer.IsLoss());
  EXPECT_TRUE(layer.AllowForceBackward(0));
  EXPECT_TRUE(layer.AllowForceBackward(1));
}

TEST_F(EuclideanLossLayerTest, Errors) {
  Blob c(5, 11, 1, 1), d(4, 12, 1, 1);
  EXPECT_THROW(EuclideanLossLayer(EuclideanParam()).SetUp({&a_, &c}, {&loss_}), Error);
  EXPECT_THROW(EuclideanLossLayer(EuclideanParam()).SetUp({&a_, &d}, {&loss_}), Error);
  EXPECT_THROW(EuclideanLossLayer(EuclideanParam()).SetUp({&a_}, {&loss_}), Error);
}

}  // namespace
}  // namespace hogstream
