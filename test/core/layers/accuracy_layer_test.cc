// Accuracy: top-1 / top-3, ignore_label and per-class accuracy against a reference count.
#include "core/layers/accuracy_layer.hpp"
#include "test/test_seed.hpp"

#include <gtest/gtest.h>

#include <random>

#include "test/core/gradient_checker.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

constexpr int kIgnore = 3;  // a real class, so ignoring it is visible

struct AccuracyCase {
  const char* name;
  int top_k;
  int axis;
  bool ignore;  // set ignore_label and mark every fourth position with it
};

pb::LayerParameter AccuracyParam(int top_k, int axis, bool ignore) {
  pb::LayerParameter p;
  p.set_type("Accuracy");
  auto* ap = p.mutable_accuracy_param();
  ap->set_top_k(top_k);
  ap->set_axis(axis);
  if (ignore) ap->set_ignore_label(kIgnore);
  return p;
}

class AccuracyLayerTest : public ::testing::TestWithParam<AccuracyCase> {
 protected:
  // Scores (4, 10, 2, 3) with the classes on axis 1, or (24, 10) with them last.
  AccuracyLayerTest() : gen_(::hogstream::TestSeed()) {
    const auto& c = GetParam();
    scores_.Reshape(c.axis == 1 ? std::vector<int>{4, 10, 2, 3} : std::vector<int>{24, 10});
    labels_.Reshape(c.axis == 1 ? std::vector<int>{4, 2, 3} : std::vector<int>{24});
    test::FillGaussian(&scores_, gen_);  // distinct scores: no ties
    std::uniform_int_distribution<int> cls(0, 9);
    for (int i = 0; i < labels_.count(); ++i)
      labels_.mutable_cpu_data()[i] = c.ignore && i % 4 == 2 ? kIgnore : cls(gen_);
  }

  // Overall and per-class accuracy, counting the classes that beat the true one.
  void Reference(double* overall, std::vector<double>* per_class) const {
    const auto& c = GetParam();
    const int a = scores_.CanonicalAxisIndex(c.axis);
    const int outer = scores_.count(0, a), channels = scores_.shape(a);
    const int inner = scores_.count(a + 1);
    std::vector<int> seen(channels), hit(channels);
    int count = 0, correct = 0;
    for (int o = 0; o < outer; ++o)
      for (int i = 0; i < inner; ++i) {
        const int label = static_cast<int>(labels_.cpu_data()[o * inner + i]);
        if (c.ignore && label == kIgnore) continue;
        auto score = [&](int k) { return scores_.cpu_data()[(o * channels + k) * inner + i]; };
        int better = 0;
        for (int k = 0; k < channels; ++k) better += score(k) > score(label);
        ++count;
        ++seen[label];
        if (better < c.top_k) {
          ++correct;
          ++hit[label];
        }
      }
    *overall = double(correct) / count;
    per_class->resize(channels);
    for (int k = 0; k < channels; ++k) (*per_class)[k] = seen[k] ? double(hit[k]) / seen[k] : 0;
  }

  std::mt19937 gen_;
  Blob scores_, labels_, acc_, per_class_;
};

TEST_P(AccuracyLayerTest, MatchesReference) {
  const auto& c = GetParam();
  auto layer = CreateLayer(AccuracyParam(c.top_k, c.axis, c.ignore));
  layer->SetUp({&scores_, &labels_}, {&acc_, &per_class_});
  EXPECT_EQ(acc_.num_axes(), 0);
  ASSERT_EQ(per_class_.shape(), std::vector<int>{10});
  layer->Forward({&scores_, &labels_}, {&acc_, &per_class_});
  double overall;
  std::vector<double> per_class;
  Reference(&overall, &per_class);
  EXPECT_NEAR(acc_.cpu_data()[0], overall, 1e-6);
  for (int k = 0; k < 10; ++k) EXPECT_NEAR(per_class_.cpu_data()[k], per_class[k], 1e-6) << k;
  if (c.ignore) {
    EXPECT_EQ(per_class_.cpu_data()[kIgnore], 0.f);
  }
}

TEST_P(AccuracyLayerTest, OneTop) {
  const auto& c = GetParam();
  AccuracyLayer layer(AccuracyParam(c.top_k, c.axis, c.ignore));
  layer.SetUp({&scores_, &labels_}, {&acc_});
  EXPECT_EQ(layer.Forward({&scores_, &labels_}, {&acc_}), 0.f);  // not a loss
  double overall;
  std::vector<double> per_class;
  Reference(&overall, &per_class);
  EXPECT_NEAR(acc_.cpu_data()[0], overall, 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Cases, AccuracyLayerTest,
                         ::testing::Values(AccuracyCase{"Top1", 1, 1, false},
                                           AccuracyCase{"Top3", 3, 1, false},
                                           AccuracyCase{"Top1Ignore", 1, 1, true},
                                           AccuracyCase{"Top3Ignore", 3, 1, true},
                                           AccuracyCase{"Top1LastAxis", 1, -1, false},
                                           AccuracyCase{"Top3LastAxisIgnore", 3, -1, true}),
                         [](const auto& info) { return std::string(info.param.name); });

// Ties count against the prediction: equal scores all rank above the true class.
TEST(AccuracyLayerOtherTest, TiesCountAgainst) {
  Blob scores(std::vector<int>{1, 3}), labels(std::vector<int>{1}), acc;
  std::fill_n(scores.mutable_cpu_data(), 3, 0.5f);
  labels.mutable_cpu_data()[0] = 1;
  for (int k : {1, 2, 3}) {
    AccuracyLayer layer(AccuracyParam(k, 1, false));
    layer.SetUp({&scores, &labels}, {&acc});
    layer.Forward({&scores, &labels}, {&acc});
    EXPECT_EQ(acc.cpu_data()[0], k == 3 ? 1.f : 0.f) << "top_k " << k;
  }
}

TEST(AccuracyLayerOtherTest, AllIgnoredIsZero) {
  std::mt19937 gen(::hogstream::TestSeed());
  Blob scores(std::vector<int>{4, 5}), labels(std::vector<int>{4}), acc;
  test::FillGaussian(&scores, gen);
  std::fill_n(labels.mutable_cpu_data(), 4, float(kIgnore));
  AccuracyLayer layer(AccuracyParam(1, 1, true));
  layer.SetUp({&scores, &labels}, {&acc});
  layer.Forward({&scores, &labels}, {&acc});
  EXPECT_EQ(acc.cpu_data()[0], 0.f);
}

TEST(AccuracyLayerOtherTest, Errors) {
  std::mt19937 gen(::hogstream::TestSeed());
  Blob scores(4, 5, 2, 1), labels(4, 2, 1, 1), few(4, 1, 1, 1), acc;
  test::FillGaussian(&scores, gen);
  std::uniform_int_distribution<int> cls(0, 4);
  for (int i = 0; i < labels.count(); ++i) labels.mutable_cpu_data()[i] = cls(gen);
  auto setup = [&](const pb::LayerParameter& p, Blob* l) {
    AccuracyLayer(p).SetUp({&scores, l}, {&acc});
  };
  EXPECT_THROW(setup(AccuracyParam(6, 1, false), &labels), Error);  // top_k > classes
  EXPECT_THROW(setup(AccuracyParam(0, 1, false), &labels), Error);
  EXPECT_THROW(setup(AccuracyParam(1, 4, false), &labels), Error);
  EXPECT_THROW(setup(AccuracyParam(1, 1, false), &few), Error);

  AccuracyLayer layer(AccuracyParam(1, 1, false));
  layer.SetUp({&scores, &labels}, {&acc});
  layer.Forward({&scores, &labels}, {&acc});
  EXPECT_THROW(layer.Backward({&acc}, {true, false}, {&scores, &labels}), Error);
  EXPECT_NO_THROW(layer.Backward({&acc}, {false, false}, {&scores, &labels}));
  labels.mutable_cpu_data()[3] = 5;
  EXPECT_THROW(layer.Forward({&scores, &labels}, {&acc}), Error);
}


// A label out of range names the layer, the label, the class count and where it sits in the
// batch (the reviewer met "label 50 out of range [0, 10)" with nothing else).
TEST(AccuracyLayerLabelTest, OutOfRangeLabelNamesTheLayer) {
  std::mt19937 gen(::hogstream::TestSeed());
  Blob scores(std::vector<int>{6, 10}), labels(std::vector<int>{6}), top;
  test::FillGaussian(&scores, gen);
  for (int i = 0; i < 6; ++i) labels.mutable_cpu_data()[i] = static_cast<float>(gen() % 10);
  labels.mutable_cpu_data()[4] = 50;
  pb::LayerParameter p = AccuracyParam(1, 1, false);
  p.set_name("my_accuracy");
  auto layer = CreateLayer(p);
  layer->SetUp({&scores, &labels}, {&top});
  try {
    layer->Forward({&scores, &labels}, {&top});
    FAIL() << "label 50 accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("layer 'my_accuracy' (Accuracy)"), std::string::npos) << m;
    EXPECT_NE(m.find("label 50"), std::string::npos) << m;
    EXPECT_NE(m.find("10 classes"), std::string::npos) << m;
    EXPECT_NE(m.find("item 4"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace hogstream
