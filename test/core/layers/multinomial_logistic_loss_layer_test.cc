// MultinomialLogisticLoss: value against a hand computation, the probability threshold,
// gradient, loss weight, labels out of range and bad shapes.
#include "core/layers/multinomial_logistic_loss_layer.hpp"
#include "test/test_seed.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "test/core/gradient_checker.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

pb::LayerParameter MllParam(float loss_weight = 0.f) {
  pb::LayerParameter p;
  p.set_name("mll");
  p.set_type("MultinomialLogisticLoss");
  if (loss_weight != 0.f) p.add_loss_weight(loss_weight);
  return p;
}

double Reference(const Blob& prob, const Blob& label) {
  const int num = prob.shape(0), dim = prob.count() / num;
  double loss = 0;
  for (int n = 0; n < num; ++n) {
    const int l = static_cast<int>(label.cpu_data()[n]);
    loss -= std::log(std::max(double(prob.cpu_data()[n * dim + l]), 1e-20));
  }
  return loss / num;
}

class MultinomialLogisticLossTest : public ::testing::Test {
 protected:
  // Probabilities in (0.05, 1) (not normalised: the layer does not need them to be), random
  // labels.
  MultinomialLogisticLossTest() : gen_(::hogstream::TestSeed()), prob_(6, 5, 1, 1), label_(6, 1, 1, 1) {
    test::FillUniform(&prob_, gen_, 0.05f, 1.f);
    std::uniform_int_distribution<int> cls(0, 4);
    for (int i = 0; i < 6; ++i) label_.mutable_cpu_data()[i] = cls(gen_);
  }
  std::mt19937 gen_;
  Blob prob_, label_, loss_;
};

TEST_F(MultinomialLogisticLossTest, ForwardMatchesReference) {
  auto layer = CreateLayer(MllParam());
  layer->SetUp({&prob_, &label_}, {&loss_});
  EXPECT_EQ(loss_.num_axes(), 0);
  const float returned = layer->Forward({&prob_, &label_}, {&loss_});
  const double ref = Reference(prob_, label_);
  EXPECT_GT(ref, 0.0);
  EXPECT_NEAR(loss_.cpu_data()[0], ref, 1e-5 * ref);
  EXPECT_FLOAT_EQ(returned, loss_.cpu_data()[0]);
}

TEST_F(MultinomialLogisticLossTest, ZeroProbabilityIsClampedAtThreshold) {
  const int l = static_cast<int>(label_.cpu_data()[2]);
  prob_.mutable_cpu_data()[2 * 5 + l] = 0.f;
  MultinomialLogisticLossLayer layer(MllParam());
  layer.SetUp({&prob_, &label_}, {&loss_});
  layer.Forward({&prob_, &label_}, {&loss_});
  const double ref = Reference(prob_, label_);
  EXPECT_NEAR(loss_.cpu_data()[0], ref, 1e-5 * ref);
  EXPECT_GT(loss_.cpu_data()[0], -std::log(1e-20) / 6 - 1e-3);
}

TEST_F(MultinomialLogisticLossTest, Gradient) {
  MultinomialLogisticLossLayer layer(MllParam());
  layer.SetUp({&prob_, &label_}, {&loss_});
  test::GradientCheck opt;
  opt.step = 1e-3f;
  opt.check_bottoms = {0};
  test::CheckGradients(&layer, {&prob_, &label_}, {&loss_}, opt);
}

TEST_F(MultinomialLogisticLossTest, LossWeight) {
  const float w = std::uniform_real_distribution<float>(0.5f, 4.f)(gen_);
  MultinomialLogisticLossLayer layer(MllParam(w));
  layer.SetUp({&prob_, &label_}, {&loss_});
  const float returned = layer.Forward({&prob_, &label_}, {&loss_});
  EXPECT_NEAR(returned, w * Reference(prob_, label_), 1e-5 * returned);
  layer.Backward({&loss_}, {true, false}, {&prob_, &label_});
  for (int n = 0; n < 6; ++n)
    for (int c = 0; c < 5; ++c) {
      const float p = prob_.cpu_data()[n * 5 + c];
      const double g = c == static_cast<int>(label_.cpu_data()[n]) ? -w / 6.0 / p : 0.0;
      EXPECT_NEAR(prob_.cpu_diff()[n * 5 + c], g, 1e-4 * std::max(1.0, std::abs(g)));
    }
}

TEST_F(MultinomialLogisticLossTest, Contract) {
  MultinomialLogisticLossLayer layer(MllParam());
  EXPECT_TRUE(layer.IsLoss());
  EXPECT_TRUE(layer.AllowForceBackward(0));
  EXPECT_FALSE(layer.AllowForceBackward(1));
  EXPECT_STREQ(CreateLayer(MllParam())->type(), "MultinomialLogisticLoss");
}

TEST_F(MultinomialLogisticLossTest, Errors) {
  label_.mutable_cpu_data()[3] = 5;
  MultinomialLogisticLossLayer layer(MllParam());
  layer.SetUp({&prob_, &label_}, {&loss_});
  try {
    layer.Forward({&prob_, &label_}, {&loss_});
    ADD_FAILURE() << "label 5 of 5 classes accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
  }
  Blob two_labels(6, 2, 1, 1), short_batch(5, 1, 1, 1);
  EXPECT_THROW(MultinomialLogisticLossLayer(MllParam()).SetUp({&prob_, &two_labels}, {&loss_}),
               Error);
  EXPECT_THROW(MultinomialLogisticLossLayer(MllParam()).SetUp({&prob_, &short_batch}, {&loss_}),
               Error);
}

}  // namespace
}  // namespace hogstream
