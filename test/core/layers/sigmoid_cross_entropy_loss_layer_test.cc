// SigmoidCrossEntropyLoss: loss against a reference for every normalisation and
// ignore_label, hard and soft targets, extreme scores, gradients and loss weights.
#include "core/layers/sigmoid_cross_entropy_loss_layer.hpp"
#include "test/test_seed.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "test/core/gradient_checker.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

constexpr int kIgnore = -1;

// One way of configuring loss_param, and the normalisation it must amount to.
struct LossCase {
  const char* name;
  int normalization;  // -1 = unset
  int normalize;      // legacy bool; -1 = unset
  bool ignore;        // set ignore_label and mark every third target with it
  pb::LossParameter::NormalizationMode expect;
};

pb::LayerParameter LossParam(const LossCase& c) {
  pb::LayerParameter p;
  p.set_type("SigmoidCrossEntropyLoss");
  auto* lp = p.mutable_loss_param();
  if (c.normalization >= 0)
    lp->set_normalization(static_cast<pb::LossParameter::NormalizationMode>(c.normalization));
  if (c.normalize >= 0) lp->set_normalize(c.normalize == 1);
  if (c.ignore) lp->set_ignore_label(kIgnore);
  return p;
}

// Random scores, and targets drawn from {0, 1} (or [0, 1] when `soft`).
void MakeInputs(std::mt19937& gen, const LossCase& c, bool soft, Blob* x, Blob* t) {
  test::FillGaussian(x, gen, 0.f, 2.f);
  std::uniform_real_distribution<float> u(0.f, 1.f);
  float* p = t->mutable_cpu_data();
  for (int i = 0; i < t->count(); ++i)
    p[i] = c.ignore && i % 3 == 1 ? kIgnore : soft ? u(gen) : std::round(u(gen));
}

// -(t log p + (1 - t) log(1 - p)) with p = sigmoid(x), written as
// max(x, 0) - x t + log(1 + exp(-|x|)) so that it holds for any x; then the normaliser.
double ReferenceLoss(const Blob& x, const Blob& t, const LossCase& c) {
  double loss = 0;
  int valid = 0;
  for (int i = 0; i < x.count(); ++i) {
    const double v = x.cpu_data()[i], target = t.cpu_data()[i];
    if (c.ignore && target == kIgnore) continue;
    loss += std::max(v, 0.0) - v * target + std::log(1 + std::exp(-std::fabs(v)));
    ++valid;
  }
  const int outer = x.shape(0);
  double n = 1;
  switch (c.expect) {
    case pb::LossParameter::FULL: n = x.count(); break;
    case pb::LossParameter::VALID: n = valid; break;
    case pb::LossParameter::BATCH_SIZE: n = outer; break;
    case pb::LossParameter::NONE: n = 1; break;
  }
  return loss / std::max(1.0, n);
}

class SigmoidCrossEntropyLossLayerTest : public ::testing::TestWithParam<LossCase> {
 protected:
  SigmoidCrossEntropyLossLayerTest()
      : gen_(::hogstream::TestSeed()), x_(4, 3, 2, 2), t_(4, 3, 2, 2) {
    MakeInputs(gen_, GetParam(), false, &x_, &t_);
  }
  std::mt19937 gen_;
  Blob x_, t_, loss_;
};

TEST_P(SigmoidCrossEntropyLossLayerTest, ForwardMatchesReference) {
  auto layer = CreateLayer(LossParam(GetParam()));
  layer->SetUp({&x_, &t_}, {&loss_});
  EXPECT_EQ(loss_.num_axes(), 0);
  const float returned = layer->Forward({&x_, &t_}, {&loss_});
  const double ref = ReferenceLoss(x_, t_, GetParam());
  EXPECT_NEAR(loss_.cpu_data()[0], ref, 1e-5 * std::max(1.0, ref));
  EXPECT_FLOAT_EQ(returned, loss_.cpu_data()[0]);
}

TEST_P(SigmoidCrossEntropyLossLayerTest, SoftTargets) {
  MakeInputs(gen_, GetParam(), true, &x_, &t_);
  SigmoidCrossEntropyLossLayer layer(LossParam(GetParam()));
  layer.SetUp({&x_, &t_}, {&loss_});
  layer.Forward({&x_, &t_}, {&loss_});
  const double ref = ReferenceLoss(x_, t_, GetParam());
  EXPECT_NEAR(loss_.cpu_data()[0], ref, 1e-5 * std::max(1.0, ref));
  test::GradientCheck opt;
  opt.check_bottoms = {0};
  test::CheckGradients(&layer, {&x_, &t_}, {&loss_}, opt);
}

TEST_P(SigmoidCrossEntropyLossLayerTest, Gradient) {
  SigmoidCrossEntropyLossLayer layer(LossParam(GetParam()));
  layer.SetUp({&x_, &t_}, {&loss_});
  test::GradientCheck opt;
  opt.check_bottoms = {0};
  test::CheckGradients(&layer, {&x_, &t_}, {&loss_}, opt);
}

TEST_P(SigmoidCrossEntropyLossLayerTest, LossWeight) {
  const float w = std::uniform_real_distribution<float>(0.5f, 4.f)(gen_);
  pb::LayerParameter p = LossParam(GetParam());
  SigmoidCrossEntropyLossLayer plain(p);
  p.add_loss_weight(w);
  SigmoidCrossEntropyLossLayer weighted(p);
  Blob loss2;
  plain.SetUp({&x_, &t_}, {&loss_});
  weighted.SetUp({&x_, &t_}, {&loss2});
  plain.Forward({&x_, &t_}, {&loss_});
  const float returned = weighted.Forward({&x_, &t_}, {&loss2});
  EXPECT_NEAR(returned, w * loss_.cpu_data()[0], 1e-5 * std::max(1.f, returned));
  plain.Backward({&loss_}, {true, false}, {&x_, &t_});
  const std::vector<float> g(x_.cpu_diff(), x_.cpu_diff() + x_.count());
  weighted.Backward({&loss2}, {true, false}, {&x_, &t_});
  for (int i = 0; i < x_.count(); ++i) EXPECT_NEAR(x_.cpu_diff()[i], w * g[i], 1e-6);
}

// Caffe's default for this layer is BATCH_SIZE, not the proto's VALID.
INSTANTIATE_TEST_SUITE_P(
    Normalization, SigmoidCrossEntropyLossLayerTest,
    ::testing::Values(LossCase{"Default", -1, -1, false, pb::LossParameter::BATCH_SIZE},
                      LossCase{"DefaultIgnore", -1, -1, true, pb::LossParameter::BATCH_SIZE},
                      LossCase{"FullIgnore", 0, -1, true, pb::LossParameter::FULL},
                      LossCase{"Valid", 1, -1, false, pb::LossParameter::VALID},
                      LossCase{"ValidIgnore", 1, -1, true, pb::LossParameter::VALID},
                      LossCase{"BatchSizeIgnore", 2, -1, true, pb::LossParameter::BATCH_SIZE},
                      LossCase{"NoneIgnore", 3, -1, true, pb::LossParameter::NONE},
                      LossCase{"LegacyNormalize", -1, 1, true, pb::LossParameter::VALID},
                      LossCase{"LegacyNoNormalize", -1, 0, true, pb::LossParameter::BATCH_SIZE}),
    [](const auto& info) { return std::string(info.param.name); });

const LossCase kDefault{"Default", -1, -1, false, pb::LossParameter::BATCH_SIZE};

TEST(SigmoidCrossEntropyLossLayerOtherTest, ExtremeScoresStayFinite) {
  std::mt19937 gen(::hogstream::TestSeed());
  Blob x(std::vector<int>{8, 16}), t(std::vector<int>{8, 16}), loss;
  MakeInputs(gen, kDefault, false, &x, &t);
  std::uniform_real_distribution<float> mag(50.f, 150.f);
  for (int i = 0; i < x.count(); ++i) x.mutable_cpu_data()[i] *= mag(gen);
  SigmoidCrossEntropyLossLayer layer(LossParam(kDefault));
  layer.SetUp({&x, &t}, {&loss});
  layer.Forward({&x, &t}, {&loss});
  layer.Backward({&loss}, {true, false}, {&x, &t});
  const double ref = ReferenceLoss(x, t, kDefault);
  ASSERT_TRUE(std::isfinite(loss.cpu_data()[0]));
  EXPECT_NEAR(loss.cpu_data()[0], ref, 1e-5 * std::max(1.0, ref));
  for (int i = 0; i < x.count(); ++i) ASSERT_TRUE(std::isfinite(x.cpu_diff()[i]));
}

TEST(SigmoidCrossEntropyLossLayerOtherTest, Contract) {
  SigmoidCrossEntropyLossLayer layer(LossParam(kDefault));
  EXPECT_TRUE(layer.IsLoss());
  EXPECT_TRUE(layer.AutoTopBlobs());
  EXPECT_FALSE(layer.AllowForceBackward(1));
}

TEST(SigmoidCrossEntropyLossLayerOtherTest, Errors) {
  std::mt19937 gen(::hogstream::TestSeed());
  Blob x(4, 3, 2, 2), t(4, 3, 2, 2), loss;
  MakeInputs(gen, kDefault, false, &x, &t);
  Blob fewer(4, 3, 2, 1), other_batch(std::vector<int>{2, 24});
  EXPECT_THROW(SigmoidCrossEntropyLossLayer(LossParam(kDefault)).SetUp({&x, &fewer}, {&loss}),
               Error);
  EXPECT_THROW(
      SigmoidCrossEntropyLossLayer(LossParam(kDefault)).SetUp({&x, &other_batch}, {&loss}),
      Error);
  SigmoidCrossEntropyLossLayer layer(LossParam(kDefault));
  layer.SetUp({&x, &t}, {&loss});
  layer.Forward({&x, &t}, {&loss});
  EXPECT_THROW(layer.Backward({&loss}, {true, true}, {&x, &t}), Error);
}

}  // namespace
}  // namespace hogstream
