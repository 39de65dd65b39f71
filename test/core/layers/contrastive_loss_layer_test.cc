// ContrastiveLoss: value against a hand computation (current and legacy forms, default
// margin), gradients to both inputs, loss weight and bad shapes.
#include "core/layers/contrastive_loss_layer.hpp"
#include "test/test_seed.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "test/core/gradient_checker.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

pb::LayerParameter ContrastiveParam(float margin = 0.f, bool legacy = false,
                                    float loss_weight = 0.f) {
  pb::LayerParameter p;
  p.set_name("contrastive");
  p.set_type("ContrastiveLoss");
  if (margin != 0.f) p.mutable_contrastive_loss_param()->set_margin(margin);
  if (legacy) p.mutable_contrastive_loss_param()->set_legacy_version(true);
  if (loss_weight != 0.f) p.add_loss_weight(loss_weight);
  return p;
}

double Distance2(const Blob& a, const Blob& b, int n) {
  const int dim = a.count() / a.shape(0);
  double d2 = 0;
  for (int c = 0; c < dim; ++c) {
    const double d = double(a.cpu_data()[n * dim + c]) - b.cpu_data()[n * dim + c];
    d2 += d * d;
  }
  return d2;
}

double Reference(const Blob& a, const Blob& b, const Blob& y, double margin, bool legacy) {
  const int num = a.shape(0);
  double loss = 0;
  for (int n = 0; n < num; ++n) {
    const double d2 = Distance2(a, b, n);
    if (static_cast<int>(y.cpu_data()[n]))
      loss += d2;
    else if (legacy)
      loss += std::max(margin - d2, 0.0);
    else
      loss += std::pow(std::max(margin - std::sqrt(d2), 0.0), 2);
  }
  return loss / num / 2;
}

class ContrastiveLossTest : public ::testing::Test {
 protected:
  // Pairs close enough that, with margin 1, some dissimilar ones fall inside it and some
  // outside; similar and dissimilar labels alternate.
  ContrastiveLossTest() : gen_(::hogstream::TestSeed()), a_(10, 3, 1, 1), b_(10, 3, 1, 1), y_(10, 1, 1, 1) {
    test::FillGaussian(&a_, gen_, 0.f, 0.4f);
    test::FillGaussian(&b_, gen_, 0.f, 0.4f);
    for (int n = 0; n < 10; ++n) y_.mutable_cpu_data()[n] = n % 2 == 0 ? 1.f : 0.f;
    // Keep every distance and squared distance 0.05 away from the margin (1): no kinks.
    for (int n = 0; n < 10; ++n) {
      const double d2 = Distance2(a_, b_, n);
      if (std::abs(std::sqrt(d2) - 1.0) < 0.05 || std::abs(d2 - 1.0) < 0.05)
        for (int c = 0; c < 3; ++c) a_.mutable_cpu_data()[n * 3 + c] *= 0.7f;
    }
    // Force one dissimilar pair inside and one outside the margin.
    for (int c = 0; c < 3; ++c) {
      a_.mutable_cpu_data()[1 * 3 + c] = b_.cpu_data()[1 * 3 + c] + 0.2f;
      a_.mutable_cpu_data()[3 * 3 + c] = b_.cpu_data()[3 * 3 + c] + 0.9f;
    }
  }
  std::mt19937 gen_;
  Blob a_, b_, y_, loss_;
};

TEST_F(ContrastiveLossTest, DefaultsAndForward) {
  pb::ContrastiveLossParameter defaults;
  EXPECT_FLOAT_EQ(defaults.margin(), 1.f);
  EXPECT_FALSE(defaults.legacy_version());
  auto layer = CreateLayer(ContrastiveParam());
  layer->SetUp({&a_, &b_, &y_}, {&loss_});
  const float returned = layer->Forward({&a_, &b_, &y_}, {&loss_});
  const double ref = Reference(a_, b_, y_, 1.0, false);
  EXPECT_GT(ref, 0.0);
  EXPECT_NEAR(loss_.cpu_data()[0], ref, 1e-5 * ref);
  EXPECT_FLOAT_EQ(returned, loss_.cpu_data()[0]);
  EXPECT_GT(std::abs(ref - Reference(a_, b_, y_, 1.0, true)), 1e-4);
}

TEST_F(ContrastiveLossTest, LegacyAndMargin) {
  ContrastiveLossLayer layer(ContrastiveParam(1.7f, true));
  layer.SetUp({&a_, &b_, &y_}, {&loss_});
  layer.Forward({&a_, &b_, &y_}, {&loss_});
  const double ref = Reference(a_, b_, y_, 1.7, true);
  EXPECT_NEAR(loss_.cpu_data()[0], ref, 1e-5 * ref);
}

TEST_F(ContrastiveLossTest, Gradient) {
  ContrastiveLossLayer layer(ContrastiveParam());
  layer.SetUp({&a_, &b_, &y_}, {&loss_});
  test::GradientCheck opt;
  opt.step = 1e-3f;
  opt.check_bottoms = {0, 1};
  test::CheckGradients(&layer, {&a_, &b_, &y_}, {&loss_}, opt);
}

TEST_F(ContrastiveLossTest, GradientLegacy) {
  ContrastiveLossLayer layer(ContrastiveParam(0.f, true));
  layer.SetUp({&a_, &b_, &y_}, {&loss_});
  test::GradientCheck opt;
  opt.step = 1e-3f;
  opt.check_bottoms = {0, 1};
  test::CheckGradients(&layer, {&a_, &b_, &y_}, {&loss_}, opt);
}

TEST_F(ContrastiveLossTest, LossWeight) {
  const float w = std::uniform_real_distribution<float>(0.5f, 4.f)(gen_);
  ContrastiveLossLayer layer(ContrastiveParam(0.f, false, w));
  layer.SetUp({&a_, &b_, &y_}, {&loss_});
  const float returned = layer.Forward({&a_, &b_, &y_}, {&loss_});
  EXPECT_NEAR(returned, w * Reference(a_, b_, y_, 1.0, false), 1e-5 * returned);
  test::GradientCheck opt;
  opt.step = 1e-3f;
  opt.check_bottoms = {0, 1};
  test::CheckGradients(&layer, {&a_, &b_, &y_}, {&loss_}, opt);
}

TEST_F(ContrastiveLossTest, Errors) {
  Blob b4(10, 4, 1, 1), y9(9, 1, 1, 1), b9(9, 3, 1, 1);
  EXPECT_THROW(ContrastiveLossLayer(ContrastiveParam()).SetUp({&a_, &b4, &y_}, {&loss_}), Error);
  EXPECT_THROW(ContrastiveLossLayer(ContrastiveParam()).SetUp({&a_, &b_, &y9}, {&loss_}), Error);
  EXPECT_THROW(ContrastiveLossLayer(ContrastiveParam()).SetUp({&a_, &b9, &y_}, {&loss_}), Error);
  EXPECT_THROW(ContrastiveLossLayer(ContrastiveParam()).SetUp({&a_, &b_}, {&loss_}), Error);
  ContrastiveLossLayer layer(ContrastiveParam());
  EXPECT_TRUE(layer.AllowForceBackward(0));
  EXPECT_TRUE(layer.AllowForceBackward(1));
  EXPECT_FALSE(layer.AllowForceBackward(2));
}

TEST(ContrastiveLossParam, FieldNumbersAreCaffes) {
  EXPECT_EQ(pb::LayerParameter::descriptor()->FindFieldByName("contrastive_loss_param")->number(),
            105);
  const auto* m = pb::ContrastiveLossParameter::descriptor();
  EXPECT_EQ(m->FindFieldByName("margin")->number(), 1);
  EXPECT_EQ(m->FindFieldByName("legacy_version")->number(), 2);
}

}  // namespace
}  // namespace hogstream
