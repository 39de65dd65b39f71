// InfogainLoss: value against a hand computation (softmax of the scores, H-weighted log
// probabilities), agreement with SoftmaxWithLoss for H = I, H from a BlobProto file, axis,
// ignore_label, gradient, loss weight, and a missing or misshapen H.
#include "core/layers/infogain_loss_layer.hpp"
#include "test/test_seed.hpp"

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>

#include "core/io.hpp"
#include "test/core/gradient_checker.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

constexpr int kIgnore = 7;

pb::LayerParameter InfogainParam(int axis = 1, float loss_weight = 0.f) {
  pb::LayerParameter p;
  p.set_name("infogain");
  p.set_type("InfogainLoss");
  if (axis != 1) p.mutable_infogain_loss_param()->set_axis(axis);
  if (loss_weight != 0.f) p.add_loss_weight(loss_weight);
  return p;
}

// Naive double-precision loss, normalised by the number of non-ignored positions (VALID).
double Reference(const Blob& s, const Blob& label, const Blob& h, int axis, bool ignore) {
  const int a = s.CanonicalAxisIndex(axis);
  const int outer = s.count(0, a), k = s.shape(a), inner = s.count(a + 1);
  double loss = 0;
  int valid = 0;
  for (int o = 0; o < outer; ++o)
    for (int i = 0; i < inner; ++i) {
      const int l = static_cast<int>(label.cpu_data()[o * inner + i]);
      if (ignore && l == kIgnore) continue;
      double sum = 0;
      for (int c = 0; c < k; ++c) sum += std::exp(double(s.cpu_data()[(o * k + c) * inner + i]));
      for (int c = 0; c < k; ++c) {
        const double p = std::exp(double(s.cpu_data()[(o * k + c) * inner + i])) / sum;
        loss -= h.cpu_data()[l * k + c] * std::log(std::max(p, double(FLT_MIN)));
      }
      ++valid;
    }
  return loss / std::max(valid, 1);
}

class InfogainLossTest : public ::testing::Test {
 protected:
  InfogainLossTest()
      : gen_(::hogstream::TestSeed()), s_(4, 5, 2, 3), label_(4, 1, 2, 3), h_(1, 1, 5, 5) {
    test::FillGaussian(&s_, gen_, 0.f, 2.f);
    test::FillUniform(&h_, gen_, 0.1f, 2.f);
    std::uniform_int_distribution<int> cls(0, 4);
    for (int i = 0; i < label_.count(); ++i) label_.mutable_cpu_data()[i] = cls(gen_);
  }
  std::mt19937 gen_;
  Blob s_, label_, h_, loss_, prob_;
};

TEST_F(InfogainLossTest, ForwardMatchesReference) {
  EXPECT_EQ(pb::InfogainLossParameter().axis(), 1);
  auto layer = CreateLayer(InfogainParam());
  layer->SetUp({&s_, &label_, &h_}, {&loss_, &prob_});
  EXPECT_EQ(loss_.num_axes(), 0);
  const float returned = layer->Forward({&s_, &label_, &h_}, {&loss_, &prob_});
  const double ref = Reference(s_, label_, h_, 1, false);
  EXPECT_GT(ref, 0.0);
  EXPECT_NEAR(loss_.cpu_data()[0], ref, 1e-5 * ref);
  EXPECT_FLOAT_EQ(returned, loss_.cpu_data()[0]);
  // The second top holds the softmax probabilities: they sum to 1 over the classes.
  ASSERT_EQ(prob_.shape(), s_.shape());
  for (int o = 0; o < 4; ++o) {
    double sum = 0;
    for (int c = 0; c < 5; ++c) sum += prob_.cpu_data()[(o * 5 + c) * 6 + 2];
    EXPECT_NEAR(sum, 1.0, 1e-5);
  }
}

TEST_F(InfogainLossTest, IdentityMatchesSoftmaxWithLoss) {
  float* h = h_.mutable_cpu_data();
  for (int i = 0; i < 25; ++i) h[i] = i % 6 == 0 ? 1.f : 0.f;
  InfogainLossLayer layer(InfogainParam());
  layer.SetUp({&s_, &label_, &h_}, {&loss_});
  layer.Forward({&s_, &label_, &h_}, {&loss_});
  pb::LayerParameter sp;
  sp.set_type("SoftmaxWithLoss");
  Blob ref_loss;
  auto softmax_loss = CreateLayer(sp);
  softmax_loss->SetUp({&s_, &label_}, {&ref_loss});
  softmax_loss->Forward({&s_, &label_}, {&ref_loss});
  EXPECT_NEAR(loss_.cpu_data()[0], ref_loss.cpu_data()[0], 1e-5 * ref_loss.cpu_data()[0]);
}

TEST_F(InfogainLossTest, MatrixFromSourceFile) {
  const std::string path = ::testing::TempDir() + "/infogain_h_" +
                           std::to_string(::hogstream::TestSeed()) + ".binaryproto";
  pb::BlobProto proto;
  h_.ToProto(&proto);
  WriteBinaryProtoAtomic(path, proto);
  pb::LayerParameter p = InfogainParam();
  p.mutable_infogain_loss_param()->set_source(path);
  InfogainLossLayer layer(p);
  layer.SetUp({&s_, &label_}, {&loss_});
  layer.Forward({&s_, &label_}, {&loss_});
  const double ref = Reference(s_, label_, h_, 1, false);
  EXPECT_NEAR(loss_.cpu_data()[0], ref, 1e-5 * ref);
  test::GradientCheck opt;
  opt.check_bottoms = {0};
  test::CheckGradients(&layer, {&s_, &label_}, {&loss_}, opt);
  std::remove(path.c_str());
}

TEST_F(InfogainLossTest, OtherAxisAndIgnoreLabel) {
  // Classes along the last axis: scores 4 x 2 x 3 x 5, labels 4 x 2 x 3.
  Blob s(std::vector<int>{4, 2, 3, 5}), label(std::vector<int>{4, 2, 3});
  test::FillGaussian(&s, gen_, 0.f, 2.f);
  std::uniform_int_distribution<int> cls(0, 4);
  for (int i = 0; i < label.count(); ++i)
    label.mutable_cpu_data()[i] = i % 4 == 1 ? kIgnore : cls(gen_);
  pb::LayerParameter p = InfogainParam(-1);
  p.mutable_loss_param()->set_ignore_label(kIgnore);
  InfogainLossLayer layer(p);
  layer.SetUp({&s, &label, &h_}, {&loss_});
  layer.Forward({&s, &label, &h_}, {&loss_});
  const double ref = Reference(s, label, h_, -1, true);
  EXPECT_NEAR(loss_.cpu_data()[0], ref, 1e-5 * ref);
  test::GradientCheck opt;
  opt.check_bottoms = {0};
  test::CheckGradients(&layer, {&s, &label, &h_}, {&loss_}, opt);
}

TEST_F(InfogainLossTest, Gradient) {
  InfogainLossLayer layer(InfogainParam());
  layer.SetUp({&s_, &label_, &h_}, {&loss_});
  test::GradientCheck opt;
  opt.check_bottoms = {0};
  test::CheckGradients(&layer, {&s_, &label_, &h_}, {&loss_}, opt);
}

TEST_F(InfogainLossTest, LossWeight) {
  const float w = std::uniform_real_distribution<float>(0.5f, 4.f)(gen_);
  InfogainLossLayer layer(InfogainParam(1, w));
  layer.SetUp({&s_, &label_, &h_}, {&loss_});
  const float returned = layer.Forward({&s_, &label_, &h_}, {&loss_});
  EXPECT_NEAR(returned, w * Reference(s_, label_, h_, 1, false), 1e-5 * returned);
  test::GradientCheck opt;
  opt.check_bottoms = {0};
  test::CheckGradients(&layer, {&s_, &label_, &h_}, {&loss_}, opt);
}

TEST_F(InfogainLossTest, Errors) {
  // No third bottom and no source.
  try {
    InfogainLossLayer(InfogainParam()).SetUp({&s_, &label_}, {&loss_});
    ADD_FAILURE() << "no infogain matrix accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("infogain_loss_param.source"), std::string::npos)
        << e.what();
  }
  // A source that does not exist.
  pb::LayerParameter p = InfogainParam();
  p.mutable_infogain_loss_param()->set_source(::testing::TempDir() + "/no_such_infogain.bp");
  EXPECT_THROW(InfogainLossLayer(p).SetUp({&s_, &label_}, {&loss_}), Error);
  // H of the wrong size, labels of the wrong count.
  Blob h4(1, 1, 4, 4), bad_label(4, 1, 2, 2);
  EXPECT_THROW(InfogainLossLayer(InfogainParam()).SetUp({&s_, &label_, &h4}, {&loss_}), Error);
  EXPECT_THROW(InfogainLossLayer(InfogainParam()).SetUp({&s_, &bad_label, &h_}, {&loss_}),
               Error);
  // A label out of range.
  label_.mutable_cpu_data()[3] = 5;
  InfogainLossLayer layer(InfogainParam());
  layer.SetUp({&s_, &label_, &h_}, {&loss_});
  EXPECT_THROW(layer.Forward({&s_, &label_, &h_}, {&loss_}), Error);
  EXPECT_FALSE(layer.AllowForceBackward(1));
  EXPECT_FALSE(layer.AllowForceBackward(2));
}

TEST(InfogainLossParam, FieldNumbersAreCaffes) {
  EXPECT_EQ(pb::LayerParameter::descriptor()->FindFieldByName("infogain_loss_param")->number(),
            116);
  EXPECT_EQ(pb::InfogainLossParameter::descriptor()->FindFieldByName("source")->number(), 1);
  EXPECT_EQ(pb::InfogainLossParameter::descriptor()->FindFieldByName("axis")->number(), 2);
}

}  // namespace
}  // namespace hogstream
