// HingeLoss: L1 (default) and L2 values against a hand computation, gradients, loss weight,
// labels out of range and bad shapes.
#include "core/layers/hinge_loss_layer.hpp"
#include "test/test_seed.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "test/core/gradient_checker.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

pb::LayerParameter HingeParam(int norm = 0, float loss_weight = 0.f) {
  pb::LayerParameter p;
  p.set_name("hinge");
  p.set_type("HingeLoss");
  if (norm) p.mutable_hinge_loss_param()->set_norm(static_cast<pb::HingeLossParameter::Norm>(norm));
  if (loss_weight != 0.f) p.add_loss_weight(loss_weight);
  return p;
}

double Reference(const Blob& x, const Blob& label, bool l2) {
  const int num = x.shape(0), dim = x.count() / num;
  double loss = 0;
  for (int n = 0; n < num; ++n)
    for (int c = 0; c < dim; ++c) {
      const double t = c == static_cast<int>(label.cpu_data()[n]) ? 1 : -1;
      const double m = std::max(0.0, 1 - t * x.cpu_data()[n * dim + c]);
      loss += l2 ? m * m : m;
    }
  return loss / num;
}

class HingeLossTest : public ::testing::Test {
 protected:
  // Scores kept at least 0.05 from the hinges at +-1, so the numerical gradient is smooth.
  HingeLossTest() : gen_(::hogstream::TestSeed()), x_(8, 4, 1, 1), label_(8, 1, 1, 1) {
    test::FillGaussian(&x_, gen_, 0.f, 1.5f);
    float* x = x_.mutable_cpu_data();
    for (int i = 0; i < x_.count(); ++i)
      if (std::abs(std::abs(x[i]) - 1.f) < 0.05f) x[i] += x[i] > 0 ? 0.2f : -0.2f;
    std::uniform_int_distribution<int> cls(0, 3);
    for (int i = 0; i < 8; ++i) label_.mutable_cpu_data()[i] = cls(gen_);
  }
  std::mt19937 gen_;
  Blob x_, label_, loss_;
};

TEST_F(HingeLossTest, DefaultIsL1) {
  EXPECT_EQ(pb::HingeLossParameter().norm(), pb::HingeLossParameter::L1);
  auto layer = CreateLayer(HingeParam());
  layer->SetUp({&x_, &label_}, {&loss_});
  const float returned = layer->Forward({&x_, &label_}, {&loss_});
  const double ref = Reference(x_, label_, false);
  EXPECT_GT(ref, 0.0);
  EXPECT_NEAR(loss_.cpu_data()[0], ref, 1e-5 * ref);
  EXPECT_FLOAT_EQ(returned, loss_.cpu_data()[0]);
}

TEST_F(HingeLossTest, L2MatchesReference) {
  HingeLossLayer layer(HingeParam(pb::HingeLossParameter::L2));
  layer.SetUp({&x_, &label_}, {&loss_});
  layer.Forward({&x_, &label_}, {&loss_});
  const double ref = Reference(x_, label_, true);
  EXPECT_NEAR(loss_.cpu_data()[0], ref, 1e-5 * ref);
  EXPECT_GT(std::abs(ref - Reference(x_, label_, false)), 1e-3);
}

TEST_F(HingeLossTest, GradientL1) {
  HingeLossLayer layer(HingeParam());
  layer.SetUp({&x_, &label_}, {&loss_});
  test::GradientCheck opt;
  opt.check_bottoms = {0};
  test::CheckGradients(&layer, {&x_, &label_}, {&loss_}, opt);
}

TEST_F(HingeLossTest, GradientL2) {
  HingeLossLayer layer(HingeParam(pb::HingeLossParameter::L2));
  layer.SetUp({&x_, &label_}, {&loss_});
  test::GradientCheck opt;
  opt.check_bottoms = {0};
  test::CheckGradients(&layer, {&x_, &label_}, {&loss_}, opt);
}

TEST_F(HingeLossTest, LossWeight) {
  const float w = std::uniform_real_distribution<float>(0.5f, 4.f)(gen_);
  HingeLossLayer layer(HingeParam(pb::HingeLossParameter::L2, w));
  layer.SetUp({&x_, &label_}, {&loss_});
  const float returned = layer.Forward({&x_, &label_}, {&loss_});
  EXPECT_NEAR(returned, w * Reference(x_, label_, true), 1e-5 * returned);
  layer.Backward({&loss_}, {true, false}, {&x_, &label_});
  for (int n = 0; n < 8; ++n)
    for (int c = 0; c < 4; ++c) {
      const double t = c == static_cast<int>(label_.cpu_data()[n]) ? 1 : -1;
      const double m = std::max(0.0, 1 - t * x_.cpu_data()[n * 4 + c]);
      EXPECT_NEAR(x_.cpu_diff()[n * 4 + c], -t * 2 * m * w / 8, 1e-5);
    }
  test::GradientCheck opt;
  opt.check_bottoms = {0};
  test::CheckGradients(&layer, {&x_, &label_}, {&loss_}, opt);
}

TEST_F(HingeLossTest, Errors) {
  label_.mutable_cpu_data()[5] = -1;
  HingeLossLayer layer(HingeParam());
  layer.SetUp({&x_, &label_}, {&loss_});
  try {
    layer.Forward({&x_, &label_}, {&loss_});
    ADD_FAILURE() << "label -1 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
  }
  Blob two_labels(8, 2, 1, 1);
  EXPECT_THROW(HingeLossLayer(HingeParam()).SetUp({&x_, &two_labels}, {&loss_}), Error);
  EXPECT_FALSE(HingeLossLayer(HingeParam()).AllowForceBackward(1));
}

TEST(HingeLossParam, FieldNumbersAreCaffes) {
  EXPECT_EQ(pb::LayerParameter::descriptor()->FindFieldByName("hinge_loss_param")->number(), 114);
  EXPECT_EQ(pb::HingeLossParameter::descriptor()->FindFieldByName("norm")->number(), 1);
  EXPECT_EQ(static_cast<int>(pb::HingeLossParameter::L1), 1);
  EXPECT_EQ(static_cast<int>(pb::HingeLossParameter::L2), 2);
}

}  // namespace
}  // namespace hogstream
