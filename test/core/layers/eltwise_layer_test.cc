// Eltwise: SUM (with and without coeffs), PROD and MAX forward against a reference, MAX tie
// rules, numerical gradients for every op (PROD both ways), and parameter/shape errors.
#include "core/layers/eltwise_layer.hpp"
#include "test/test_seed.hpp"

#include <gtest/gtest.h>

#include <algorithm>

#include "core/math.hpp"
#include "test/core/gradient_checker.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

using EP = pb::EltwiseParameter;

pb::LayerParameter Param(EP::EltwiseOp op, std::vector<float> coeffs = {}, bool stable = true) {
  pb::LayerParameter p;
  p.set_type("Eltwise");
  p.mutable_eltwise_param()->set_operation(op);
  p.mutable_eltwise_param()->set_stable_prod_grad(stable);
  for (float c : coeffs) p.mutable_eltwise_param()->add_coeff(c);
  return p;
}

struct Config {
  EP::EltwiseOp op;
  std::vector<float> coeffs;
  bool stable = true;
};

class EltwiseConfigTest : public ::testing::TestWithParam<Config> {
 protected:
  void SetUp() override {
    for (Blob& b : x_) {
      b.Reshape({2, 3, 4, 3});
      // Magnitudes in [0.5, 1.5] with random signs: PROD's top / bottom stays well defined.
      test::FillUniform(&b, gen_, 0.5f, 1.5f);
      std::bernoulli_distribution sign(0.5);
      for (int i = 0; i < b.count(); ++i)
        if (sign(gen_)) b.mutable_cpu_data()[i] *= -1.f;
    }
    if (GetParam().op == EP::MAX) {
      // Keep the three candidates of every element at least 0.1 apart (no ties near the
      // check's step).
      for (int i = 0; i < x_[0].count(); ++i) {
        std::vector<float> v{-0.6f, 0.1f, 0.8f};
        std::shuffle(v.begin(), v.end(), gen_);
        const float shift = std::uniform_real_distribution<float>(-1.f, 1.f)(gen_);
        for (int k = 0; k < 3; ++k) x_[k].mutable_cpu_data()[i] = v[k] + shift;
      }
    }
    bottoms_ = {&x_[0], &x_[1], &x_[2]};
  }
  std::mt19937 gen_{::hogstream::TestSeed()};
  Blob x_[3], y_;
  Blobs bottoms_;
};

TEST_P(EltwiseConfigTest, ForwardMatchesReference) {
  const Config c = GetParam();
  auto layer = CreateLayer(Param(c.op, c.coeffs, c.stable));
  layer->SetUp(bottoms_, {&y_});
  layer->Forward(bottoms_, {&y_});
  ASSERT_EQ(y_.shape(), x_[0].shape());
  for (int i = 0; i < y_.count(); ++i) {
    const float a = x_[0].cpu_data()[i], b = x_[1].cpu_data()[i], d = x_[2].cpu_data()[i];
    float want = 0;
    switch (c.op) {
      case EP::PROD: want = a * b * d; break;
      case EP::MAX: want = std::max({a, b, d}); break;
      case EP::SUM:
        want = c.coeffs.empty() ? a + b + d : c.coeffs[0] * a + c.coeffs[1] * b + c.coeffs[2] * d;
        break;
    }
    EXPECT_NEAR(y_.cpu_data()[i], want, 1e-6f * std::max(1.f, std::fabs(want))) << i;
  }
}

TEST_P(EltwiseConfigTest, Gradient) {
  const Config c = GetParam();
  EltwiseLayer layer(Param(c.op, c.coeffs, c.stable));
  layer.SetUp(bottoms_, {&y_});
  test::CheckGradients(&layer, bottoms_, {&y_});
}

INSTANTIATE_TEST_SUITE_P(Configs, EltwiseConfigTest,
                         ::testing::Values(Config{EP::SUM, {}}, Config{EP::SUM, {0.5f, -2.f, 1.5f}},
                                           Config{EP::PROD, {}, true}, Config{EP::PROD, {}, false},
                                           Config{EP::MAX, {}}));

TEST(EltwiseLayerTest, MaxTiesFollowCaffe) {
  std::mt19937 gen(::hogstream::TestSeed());
  Blob a({2, 5}), b({2, 5}), c({2, 5}), y;
  test::FillGaussian(&a, gen);
  copy(a.count(), a.cpu_data(), b.mutable_cpu_data());
  copy(a.count(), a.cpu_data(), c.mutable_cpu_data());
  auto layer = CreateLayer(Param(EP::MAX));
  layer->SetUp({&a, &b, &c}, {&y});
  layer->Forward({&a, &b, &c}, {&y});
  test::FillGaussian(&y, gen);
  copy(y.count(), y.cpu_data(), y.mutable_cpu_diff());
  layer->Backward({&y}, {true, true, true}, {&a, &b, &c});
  // Between bottoms 0 and 1 a tie goes to 1; bottom 2 must be strictly larger to win.
  for (int i = 0; i < a.count(); ++i) {
    EXPECT_EQ(a.cpu_diff()[i], 0.f);
    EXPECT_EQ(b.cpu_diff()[i], y.cpu_diff()[i]);
    EXPECT_EQ(c.cpu_diff()[i], 0.f);
  }
}

TEST(EltwiseLayerTest, BadParametersAreErrors) {
  Blob a({2, 3, 4}), b({2, 3, 4}), c({2, 4, 3}), y;
  auto sum = CreateLayer(Param(EP::SUM));
  try {
    sum->SetUp({&a, &c}, {&y});
    ADD_FAILURE() << "mismatched shapes accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(a.shape_string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(c.shape_string()), std::string::npos) << e.what();
  }
  auto few = CreateLayer(Param(EP::SUM, {1.f}));
  EXPECT_THROW(few->SetUp({&a, &b}, {&y}), Error);
  auto prod = CreateLayer(Param(EP::PROD, {1.f, 2.f}));
  EXPECT_THROW(prod->SetUp({&a, &b}, {&y}), Error);
  auto one = CreateLayer(Param(EP::SUM));
  EXPECT_THROW(one->SetUp({&a}, {&y}), Error);
}

}  // namespace
}  // namespace hogstream
