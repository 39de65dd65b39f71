// SoftmaxWithLoss: loss against a reference for every normalisation and ignore_label,
// gradients, loss weights, the probability top and bad inputs.
#include "core/layers/softmax_with_loss_layer.hpp"
#include "test/test_seed.hpp"

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <random>

#include "test/core/gradient_checker.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

constexpr int kIgnore = 255;

// One way of configuring loss_param, and the normalisation it must amount to.
struct LossCase {
  const char* name;
  int normalization;  // -1 = unset
  int normalize;      // legacy bool; -1 = unset
  bool ignore;        // set ignore_label and mark every third position with it
  pb::LossParameter::NormalizationMode expect;
};

pb::LayerParameter LossParam(const LossCase& c, int axis = 1) {
  pb::LayerParameter p;
  p.set_type("SoftmaxWithLoss");
  p.mutable_softmax_param()->set_axis(axis);
  auto* lp = p.mutable_loss_param();
  if (c.normalization >= 0)
    lp->set_normalization(static_cast<pb::LossParameter::NormalizationMode>(c.normalization));
  if (c.normalize >= 0) lp->set_normalize(c.normalize == 1);
  if (c.ignore) lp->set_ignore_label(kIgnore);
  return p;
}

// Random scores, and labels drawn uniformly from the classes along `axis`.
void MakeInputs(std::mt19937& gen, const LossCase& c, int axis, Blob* scores, Blob* labels) {
  test::FillGaussian(scores, gen, 0.f, 2.f);
  std::uniform_int_distribution<int> cls(0, scores->shape(axis) - 1);
  float* l = labels->mutable_cpu_data();
  for (int i = 0; i < labels->count(); ++i) l[i] = c.ignore && i % 3 == 1 ? kIgnore : cls(gen);
}

// The loss computed naively in double: softmax, -log(max(p, FLT_MIN)), then the normaliser.
double ReferenceLoss(const Blob& scores, const Blob& labels, int axis, const LossCase& c) {
  const int a = scores.CanonicalAxisIndex(axis);
  const int outer = scores.count(0, a), channels = scores.shape(a), inner = scores.count(a + 1);
  const float* s = scores.cpu_data();
  double loss = 0;
  int valid = 0;
  for (int o = 0; o < outer; ++o)
    for (int i = 0; i < inner; ++i) {
      const int label = static_cast<int>(labels.cpu_data()[o * inner + i]);
      if (c.ignore && label == kIgnore) continue;
      double sum = 0;
      for (int k = 0; k < channels; ++k) sum += std::exp(double(s[(o * channels + k) * inner + i]));
      const double p = std::exp(double(s[(o * channels + label) * inner + i])) / sum;
      loss -= std::log(std::max(p, double(FLT_MIN)));
      ++valid;
    }
  double n = 1;
  switch (c.expect) {
    case pb::LossParameter::FULL: n = outer * inner; break;
    case pb::LossParameter::VALID: n = valid; break;
    case pb::LossParameter::BATCH_SIZE: n = outer; break;
    case pb::LossParameter::NONE: n = 1; break;
  }
  return loss / std::max(1.0, n);
}

class SoftmaxWithLossLayerTest : public ::testing::TestWithParam<LossCase> {
 protected:
  SoftmaxWithLossLayerTest()
      : gen_(::hogstream::TestSeed()), scores_(3, 5, 2, 3), labels_(3, 2, 3, 1) {
    MakeInputs(gen_, GetParam(), 1, &scores_, &labels_);
  }
  std::mt19937 gen_;
  Blob scores_, labels_, loss_;
};

TEST_P(SoftmaxWithLossLayerTest, ForwardMatchesReference) {
  auto layer = CreateLayer(LossParam(GetParam()));
  layer->SetUp({&scores_, &labels_}, {&loss_});
  EXPECT_EQ(loss_.num_axes(), 0);
  EXPECT_EQ(loss_.count(), 1);
  const float returned = layer->Forward({&scores_, &labels_}, {&loss_});
  const double ref = ReferenceLoss(scores_, labels_, 1, GetParam());
  EXPECT_NEAR(loss_.cpu_data()[0], ref, 1e-5 * std::max(1.0, ref));
  EXPECT_FLOAT_EQ(returned, loss_.cpu_data()[0]);  // default loss weight 1
}

TEST_P(SoftmaxWithLossLayerTest, Gradient) {
  SoftmaxWithLossLayer layer(LossParam(GetParam()));
  layer.SetUp({&scores_, &labels_}, {&loss_});
  test::GradientCheck opt;
  opt.check_bottoms = {0};
  test::CheckGradients(&layer, {&scores_, &labels_}, {&loss_}, opt);
}

// A loss weight scales the returned loss and the gradient alike.
TEST_P(SoftmaxWithLossLayerTest, LossWeight) {
  const float w = std::uniform_real_distribution<float>(0.5f, 4.f)(gen_);
  pb::LayerParameter p = LossParam(GetParam());
  SoftmaxWithLossLayer plain(p);
  p.add_loss_weight(w);
  SoftmaxWithLossLayer weighted(p);
  Blob loss2;
  plain.SetUp({&scores_, &labels_}, {&loss_});
  weighted.SetUp({&scores_, &labels_}, {&loss2});
  plain.Forward({&scores_, &labels_}, {&loss_});
  const float returned = weighted.Forward({&scores_, &labels_}, {&loss2});
  EXPECT_NEAR(returned, w * loss_.cpu_data()[0], 1e-5 * std::max(1.f, returned));
  plain.Backward({&loss_}, {true, false}, {&scores_, &labels_});
  const std::vector<float> g(scores_.cpu_diff(), scores_.cpu_diff() + scores_.count());
  weighted.Backward({&loss2}, {true, false}, {&scores_, &labels_});
  for (int i = 0; i < scores_.count(); ++i) EXPECT_NEAR(scores_.cpu_diff()[i], w * g[i], 1e-6);

  test::GradientCheck opt;
  opt.check_bottoms = {0};
  test::CheckGradients(&weighted, {&scores_, &labels_}, {&loss2}, opt);
}

INSTANTIATE_TEST_SUITE_P(
    Normalization, SoftmaxWithLossLayerTest,
    ::testing::Values(LossCase{"Default", -1, -1, false, pb::LossParameter::VALID},
                      LossCase{"DefaultIgnore", -1, -1, true, pb::LossParameter::VALID},
                      LossCase{"Full", 0, -1, false, pb::LossParameter::FULL},
                      LossCase{"FullIgnore", 0, -1, true, pb::LossParameter::FULL},
                      LossCase{"ValidIgnore", 1, -1, true, pb::LossParameter::VALID},
                      LossCase{"BatchSizeIgnore", 2, -1, true, pb::LossParameter::BATCH_SIZE},
                      LossCase{"None", 3, -1, false, pb::LossParameter::NONE},
                      LossCase{"NoneIgnore", 3, -1, true, pb::LossParameter::NONE},
                      LossCase{"LegacyNormalize", -1, 1, true, pb::LossParameter::VALID},
                      LossCase{"LegacyNoNormalize", -1, 0, true, pb::LossParameter::BATCH_SIZE},
                      LossCase{"ModeBeatsLegacy", 0, 0, true, pb::LossParameter::FULL}),
    [](const auto& info) { return std::string(info.param.name); });

const LossCase kDefault{"Default", -1, -1, false, pb::LossParameter::VALID};

TEST(SoftmaxWithLossLayerOtherTest, LastAxis) {
  std::mt19937 gen(::hogstream::TestSeed());
  Blob scores(std::vector<int>{4, 3, 6}), labels(std::vector<int>{4, 3}), loss;
  MakeInputs(gen, kDefault, 2, &scores, &labels);
  SoftmaxWithLossLayer layer(LossParam(kDefault, -1));
  layer.SetUp({&scores, &labels}, {&loss});
  layer.Forward({&scores, &labels}, {&loss});
  const double ref = ReferenceLoss(scores, labels, -1, kDefault);
  EXPECT_NEAR(loss.cpu_data()[0], ref, 1e-5 * std::max(1.0, ref));
  test::GradientCheck opt;
  opt.check_bottoms = {0};
  test::CheckGradients(&layer, {&scores, &labels}, {&loss}, opt);
}

TEST(SoftmaxWithLossLayerOtherTest, SecondTopIsTheSoftmax) {
  std::mt19937 gen(::hogstream::TestSeed());
  Blob scores(3, 5, 2, 3), labels(3, 2, 3, 1), loss, prob;
  MakeInputs(gen, kDefault, 1, &scores, &labels);
  SoftmaxWithLossLayer layer(LossParam(kDefault));
  layer.SetUp({&scores, &labels}, {&loss, &prob});
  EXPECT_EQ(layer.loss(0), 1.f);
  EXPECT_EQ(layer.loss(1), 0.f);
  const float returned = layer.Forward({&scores, &labels}, {&loss, &prob});
  EXPECT_FLOAT_EQ(returned, loss.cpu_data()[0]);
  ASSERT_EQ(prob.shape(), scores.shape());
  for (int o = 0; o < 3; ++o)
    for (int i = 0; i < 6; ++i) {
      double sum = 0;
      for (int c = 0; c < 5; ++c) sum += std::exp(double(scores.cpu_data()[(o * 5 + c) * 6 + i]));
      for (int c = 0; c < 5; ++c) {
        const int k = (o * 5 + c) * 6 + i;
        EXPECT_NEAR(prob.cpu_data()[k], std::exp(double(scores.cpu_data()[k])) / sum, 1e-6);
      }
    }
}

TEST(SoftmaxWithLossLayerOtherTest, Contract) {
  SoftmaxWithLossLayer layer(LossParam(kDefault));
  EXPECT_TRUE(layer.IsLoss());
  EXPECT_TRUE(layer.AutoTopBlobs());
  EXPECT_TRUE(layer.AllowForceBackward(0));
  EXPECT_FALSE(layer.AllowForceBackward(1));
}

TEST(SoftmaxWithLossLayerOtherTest, Errors) {
  std::mt19937 gen(::hogstream::TestSeed());
  Blob scores(3, 5, 2, 3), labels(3, 2, 3, 1), loss, prob, extra;
  MakeInputs(gen, kDefault, 1, &scores, &labels);
  auto fresh = [] { return SoftmaxWithLossLayer(LossParam(kDefault)); };
  {
    Blob few(3, 2, 2, 1);
    EXPECT_THROW(fresh().SetUp({&scores, &few}, {&loss}), Error);
    Blob other_batch(std::vector<int>{2, 9});  // right count, wrong first dimension
    EXPECT_THROW(fresh().SetUp({&scores, &other_batch}, {&loss}), Error);
    EXPECT_THROW(fresh().SetUp({&scores, &labels}, {&loss, &prob, &extra}), Error);
    EXPECT_THROW(fresh().SetUp({&scores}, {&loss}), Error);
    EXPECT_THROW(SoftmaxWithLossLayer(LossParam(kDefault, 4)).SetUp({&scores, &labels}, {&loss}),
                 Error);
  }
  SoftmaxWithLossLayer layer(LossParam(kDefault));
  layer.SetUp({&scores, &labels}, {&loss});
  layer.Forward({&scores, &labels}, {&loss});
  EXPECT_THROW(layer.Backward({&loss}, {true, true}, {&scores, &labels}), Error);
  for (float bad : {5.f, -1.f, float(kIgnore)}) {  // kIgnore is not set here: out of range
    labels.mutable_cpu_data()[7] = bad;
    EXPECT_THROW(layer.Forward({&scores, &labels}, {&loss}), Error) << bad;
  }
}


// A label out of range names the layer, the label, the class count and where it sits in the
// batch (the reviewer met "label 50 out of range [0, 10)" with nothing else).
TEST(SoftmaxWithLossLayerLabelTest, OutOfRangeLabelNamesTheLayer) {
  std::mt19937 gen(::hogstream::TestSeed());
  Blob scores(std::vector<int>{6, 10}), labels(std::vector<int>{6}), top;
  test::FillGaussian(&scores, gen);
  for (int i = 0; i < 6; ++i) labels.mutable_cpu_data()[i] = static_cast<float>(gen() % 10);
  labels.mutable_cpu_data()[4] = 50;
  pb::LayerParameter p = LossParam(kDefault);
  p.set_name("my_softmaxwithloss");
  auto layer = CreateLayer(p);
  layer->SetUp({&scores, &labels}, {&top});
  try {
    layer->Forward({&scores, &labels}, {&top});
    FAIL() << "label 50 accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("layer 'my_softmaxwithloss' (SoftmaxWithLoss)"), std::string::npos) << m;
    EXPECT_NE(m.find("label 50"), std::string::npos) << m;
    EXPECT_NE(m.find("10 classes"), std::string::npos) << m;
    EXPECT_NE(m.find("item 4"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace hogstream
