// The element-wise layers taken from Caffe (AbsVal, Power, Exp, Log, BNLL, Threshold, Clip,
// Swish, ELU, PReLU): forward against each definition on random inputs, numerical gradients,
// in place against out of place (values and gradients), Caffe's proto defaults and field
// numbers, and the parameters and uses that are refused.
#include "test/test_seed.hpp"

#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>

#include "core/io.hpp"
#include "core/math.hpp"
#include "core/net.hpp"
#include "test/core/gradient_checker.hpp"
#include "test/error_of.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

using test::LayerText;

// One configuration of one layer: its prototxt, the function it computes (in double), where
// its inputs are drawn and the points where its derivative jumps (kept at least 0.03 away).
struct Case {
  std::string name;
  std::string layer;
  std::function<double(double)> f;
  float lo, hi;                // inputs: uniform in [lo, hi]; lo == hi: N(0, 1) * hi
  std::vector<float> kinks = {};
  bool in_place = true;        // whether the layer may run in place
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

double Sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }

const Case kCases[] = {
    {"AbsVal", R"(type: "AbsVal")", [](double x) { return std::fabs(x); }, 2, 2, {0}, false},
    {"PowerDefault", R"(type: "Power")", [](double x) { return x; }, 2, 2},
    {"PowerFractional", R"(type: "Power" power_param { power: 2.5 scale: 0.7 shift: 1.2 })",
     [](double x) { return std::pow(1.2 + 0.7 * x, 2.5); }, -1, 1},
    {"PowerSquare", R"(type: "Power" power_param { power: 2 scale: -0.5 shift: 0.3 })",
     [](double x) { return std::pow(0.3 - 0.5 * x, 2); }, 2, 2},
    {"PowerCubeNoShift", R"(type: "Power" power_param { power: 3 scale: 0.9 })",
     [](double x) { return std::pow(0.9 * x, 3); }, 1.5, 1.5},
    {"PowerLinear", R"(type: "Power" power_param { scale: 1.5 shift: -0.2 })",
     [](double x) { return 1.5 * x - 0.2; }, 2, 2},
    {"PowerNegative", R"(type: "Power" power_param { power: -1.5 scale: 0.5 shift: 1 })",
     [](double x) { return std::pow(1 + 0.5 * x, -1.5); }, -1, 1},
    {"PowerSqrt", R"(type: "Power" power_param { power: 0.5 scale: 2 shift: 3 })",
     [](double x) { return std::sqrt(3 + 2 * x); }, -1, 1},
    {"PowerZeroScale", R"(type: "Power" power_param { power: 2 scale: 0 shift: 1.5 })",
     [](double) { return 2.25; }, 2, 2},
    {"ExpDefault", R"(type: "Exp")", [](double x) { return std::exp(x); }, 1, 1},
    {"ExpShifted", R"(type: "Exp" exp_param { scale: 0.5 shift: 0.2 })",
     [](double x) { return std::exp(0.2 + 0.5 * x); }, 1.5, 1.5},
    {"ExpBase2", R"(type: "Exp" exp_param { base: 2 scale: 0.8 shift: -0.3 })",
     [](double x) { return std::pow(2.0, -0.3 + 0.8 * x); }, 1.5, 1.5},
    {"ExpBaseHalf", R"(type: "Exp" exp_param { base: 0.5 scale: 1.2 shift: 0.4 })",
     [](double x) { return std::pow(0.5, 0.4 + 1.2 * x); }, 1, 1},
    {"LogDefault", R"(type: "Log")", [](double x) { return std::log(x); }, 0.3, 2},
    {"LogShifted", R"(type: "Log" log_param { scale: 0.5 shift: 2 })",
     [](double x) { return std::log(2 + 0.5 * x); }, -1, 1},
    {"LogBase10", R"(type: "Log" log_param { base: 10 scale: 1.5 shift: 2.5 })",
     [](double x) { return std::log10(2.5 + 1.5 * x); }, -1, 1},
    {"LogBaseHalf", R"(type: "Log" log_param { base: 0.5 scale: -1 shift: 2 })",
     [](double x) { return std::log(2 - x) / std::log(0.5); }, -1, 1},
    {"BNLL", R"(type: "BNLL")", [](double x) { return std::log1p(std::exp(x)); }, 3, 3},
    {"Clip", R"(type: "Clip" clip_param { min: -0.5 max: 0.8 })",
     [](double x) { return std::min(std::max(x, -0.5), 0.8); }, 1.5, 1.5, {-0.5f, 0.8f}},
    {"SwishDefault", R"(type: "Swish")", [](double x) { return x * Sigmoid(x); }, 3, 3},
    {"SwishBetaHalf", R"(type: "Swish" swish_param { beta: 0.5 })",
     [](double x) { return x * Sigmoid(0.5 * x); }, 3, 3},
    {"SwishBeta2", R"(type: "Swish" swish_param { beta: 2 })",
     [](double x) { return x * Sigmoid(2 * x); }, 3, 3},
    {"ELUDefault", R"(type: "ELU")", [](double x) { return x > 0 ? x : std::expm1(x); }, 2, 2},
    {"ELUAlpha", R"(type: "ELU" elu_param { alpha: 0.3 })",
     [](double x) { return x > 0 ? x : 0.3 * std::expm1(x); }, 2, 2, {0}},
    {"ELUNegativeAlpha", R"(type: "ELU" elu_param { alpha: -0.5 })",
     [](double x) { return x > 0 ? x : -0.5 * std::expm1(x); }, 2, 2, {0}},
    {"ELUZeroAlpha", R"(type: "ELU" elu_param { alpha: 0 })",
     [](double x) { return x > 0 ? x : 0.0; }, 2, 2, {0}},
};

class NeuronCaseTest : public ::testing::TestWithParam<Case> {
 protected:
  // Fresh inputs of shape 2x3x4x5, none within 0.03 of a kink.
  void Fill(Blob* x) {
    const Case& c = GetParam();
    x->Reshape({2, 3, 4, 5});
    if (c.lo == c.hi) {
      test::FillGaussian(x, gen_, 0.f, c.hi);
    } else {
      test::FillUniform(x, gen_, c.lo, c.hi);
    }
    float* v = x->mutable_cpu_data();
    for (int i = 0; i < x->count(); ++i) {
      for (float k : c.kinks) {
        const float d = v[i] - k;
        if (std::fabs(d) < 0.03f) v[i] = k + (d < 0 ? -1.f : 1.f) * (0.03f + 0.1f * std::fabs(d));
      }
    }
  }
  std::mt19937 gen_{::hogstream::TestSeed()};
};

TEST_P(NeuronCaseTest, ForwardMatchesDefinition) {
  const Case& c = GetParam();
  Blob x, y;
  Fill(&x);
  auto layer = CreateLayer(LayerText(c.layer));
  layer->SetUp({&x}, {&y});
  layer->Forward({&x}, {&y});
  ASSERT_EQ(y.shape(), x.shape());
  int distinct = 0;
  for (int i = 0; i < x.count(); ++i) {
    const double want = c.f(x.cpu_data()[i]);
    EXPECT_NEAR(y.cpu_data()[i], want, 2e-6 * std::max(1.0, std::fabs(want)))
        << "x = " << x.cpu_data()[i];
    distinct += y.cpu_data()[i] != y.cpu_data()[0];
  }
  if (c.name != "PowerZeroScale") {
    EXPECT_GT(distinct, x.count() / 4);  // not a constant (ELU with alpha 0: half are 0)
  }
}

TEST_P(NeuronCaseTest, Gradient) {
  const Case& c = GetParam();
  Blob x, y;
  Fill(&x);
  auto layer = CreateLayer(LayerText(c.layer));
  layer->SetUp({&x}, {&y});
  test::GradientCheck opt;
  opt.step = 1e-2f;
  opt.threshold = 1e-2f;
  test::CheckGradients(layer.get(), {&x}, {&y}, opt);
}

// In place the layer must compute what it does out of place, forward and backward.
TEST_P(NeuronCaseTest, InPlaceMatchesOutOfPlace) {
  const Case& c = GetParam();
  if (!c.in_place) GTEST_SKIP() << c.name << " refuses to run in place (tested below)";
  Blob x, y, inplace, dy(2, 3, 4, 5);
  Fill(&x);
  test::FillGaussian(&dy, gen_);
  inplace.ReshapeLike(x);
  copy(x.count(), x.cpu_data(), inplace.mutable_cpu_data());
  auto a = CreateLayer(LayerText(c.layer));
  auto b = CreateLayer(LayerText(c.layer));
  a->SetUp({&x}, {&y});
  b->SetUp({&inplace}, {&inplace});
  for (int pass = 0; pass < 2; ++pass) {  // twice: the kept input must follow the new one
    if (pass == 1) {
      Fill(&x);
      copy(x.count(), x.cpu_data(), inplace.mutable_cpu_data());
    }
    a->Forward({&x}, {&y});
    b->Forward({&inplace}, {&inplace});
    copy(dy.count(), dy.cpu_data(), y.mutable_cpu_diff());
    copy(dy.count(), dy.cpu_data(), inplace.mutable_cpu_diff());
    a->Backward({&y}, {true}, {&x});
    b->Backward({&inplace}, {true}, {&inplace});
    for (int i = 0; i < x.count(); ++i) {
      ASSERT_EQ(inplace.cpu_data()[i], y.cpu_data()[i]) << "pass " << pass << " element " << i;
      ASSERT_EQ(inplace.cpu_diff()[i], x.cpu_diff()[i]) << "pass " << pass << " element " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Layers, NeuronCaseTest, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

// ---------------------------------------------------------------- per-layer details

TEST(BNLLLayerTest, LargeInputsStayFinite) {
  Blob x({6}), y;
  const float v[] = {-1000.f, -100.f, -30.f, 30.f, 100.f, 1000.f};
  std::copy(v, v + 6, x.mutable_cpu_data());
  auto layer = CreateLayer(LayerText(R"(type: "BNLL")"));
  layer->SetUp({&x}, {&y});
  layer->Forward({&x}, {&y});
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(std::isfinite(y.cpu_data()[i])) << v[i];
    EXPECT_GE(y.cpu_data()[i], 0.f) << v[i];
  }
  EXPECT_FLOAT_EQ(y.cpu_data()[2], std::exp(-30.f));  // tiny, not rounded to 0
  EXPECT_EQ(y.cpu_data()[4], 100.f);
  EXPECT_EQ(y.cpu_data()[5], 1000.f);
  set(6, 1.f, y.mutable_cpu_diff());
  layer->Backward({&y}, {true}, {&x});
  const float want[] = {0.f, 0.f, std::exp(-30.f), 1.f, 1.f, 1.f};
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(x.cpu_diff()[i], want[i], 1e-5f * want[i] + 1e-30f) << v[i];
}

TEST(ThresholdLayerTest, ForwardIsAStep) {
  std::mt19937 gen(::hogstream::TestSeed());
  for (float t : {0.f, 0.3f, -0.7f}) {
    Blob x(2, 3, 4, 5), y;
    test::FillGaussian(&x, gen);
    pb::LayerParameter p = LayerText(R"(type: "Threshold")");
    if (t != 0.f) p.mutable_threshold_param()->set_threshold(t);
    auto layer = CreateLayer(p);
    layer->SetUp({&x}, {&y});
    layer->Forward({&x}, {&y});
    int ones = 0;
    for (int i = 0; i < x.count(); ++i) {
      EXPECT_EQ(y.cpu_data()[i], x.cpu_data()[i] > t ? 1.f : 0.f) << x.cpu_data()[i];
      ones += y.cpu_data()[i] == 1.f;
    }
    EXPECT_GT(ones, 0);
    EXPECT_LT(ones, x.count());
  }
  // Exactly at the threshold is 0: the test is strict.
  Blob x({1}), y;
  x.mutable_cpu_data()[0] = 0.25f;
  auto layer = CreateLayer(LayerText(R"(type: "Threshold" threshold_param { threshold: 0.25 })"));
  layer->SetUp({&x}, {&y});
  layer->Forward({&x}, {&y});
  EXPECT_EQ(y.cpu_data()[0], 0.f);
}

TEST(ThresholdLayerTest, RefusesAGradientOnlyWhenAskedForOne) {
  Blob x(2, 3, 1, 1), y;
  std::mt19937 gen(::hogstream::TestSeed());
  test::FillGaussian(&x, gen);
  auto layer = CreateLayer(LayerText(R"(name: "step" type: "Threshold")"));
  layer->SetUp({&x}, {&y});
  layer->Forward({&x}, {&y});
  layer->Backward({&y}, {false}, {&x});  // nothing asked, nothing refused
  const std::string e = ErrorOf([&] { layer->Backward({&y}, {true}, {&x}); });
  EXPECT_NE(e.find("step"), std::string::npos) << e;
  EXPECT_NE(e.find("propagate_down: false"), std::string::npos) << e;
}

// A net that learns below a Threshold trains when the Threshold says propagate_down: false,
// and is refused at its first backward pass when it does not.
TEST(ThresholdLayerTest, InANet) {
  const std::string text = R"(
layer { name: "in" type: "Input" top: "data" top: "target"
        input_param { shape { dim: 2 dim: 3 } shape { dim: 2 dim: 1 } } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
        inner_product_param { num_output: 4 weight_filler { type: "gaussian" } } }
layer { name: "step" type: "Threshold" bottom: "ip" top: "step" PD }
layer { name: "ip2" type: "InnerProduct" bottom: "step" top: "out"
        inner_product_param { num_output: 1 weight_filler { type: "gaussian" } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "out" bottom: "target" top: "loss" }
)";
  for (bool pd : {false, true}) {
    std::string t = text;
    t.replace(t.find("PD"), 2, pd ? "" : "propagate_down: false");
    Net net(ParseNetText(t, "threshold"));
    std::mt19937 gen(::hogstream::TestSeed());
    test::FillGaussian(net.input_blobs()[0], gen);
    test::FillGaussian(net.input_blobs()[1], gen);
    if (pd) {
      const std::string e = ErrorOf([&] { net.ForwardBackward(); });
      EXPECT_NE(e.find("Threshold"), std::string::npos) << e;
    } else {
      net.ForwardBackward();
    }
  }
}

TEST(AbsValLayerTest, RefusesInPlace) {
  Blob x(2, 3, 1, 1);
  auto layer = CreateLayer(LayerText(R"(type: "AbsVal")"));
  const std::string e = ErrorOf([&] { layer->SetUp({&x}, {&x}); });
  EXPECT_NE(e.find("in place"), std::string::npos) << e;
}

TEST(ExpLayerTest, RefusesBadBase) {
  for (float base : {0.f, -2.f, -0.5f, INFINITY}) {
    Blob x(2, 3, 1, 1), y;
    pb::LayerParameter p = LayerText(R"(type: "Exp")");
    p.mutable_exp_param()->set_base(base);
    auto layer = CreateLayer(p);
    const std::string e = ErrorOf([&] { layer->SetUp({&x}, {&y}); });
    EXPECT_NE(e.find("exp_param.base"), std::string::npos) << base << ": " << e;
  }
}

TEST(LogLayerTest, RefusesBadBase) {
  for (float base : {0.f, -2.f, -0.5f, 1.f, INFINITY}) {
    Blob x(2, 3, 1, 1), y;
    pb::LayerParameter p = LayerText(R"(type: "Log")");
    p.mutable_log_param()->set_base(base);
    auto layer = CreateLayer(p);
    const std::string e = ErrorOf([&] { layer->SetUp({&x}, {&y}); });
    EXPECT_NE(e.find("log_param.base"), std::string::npos) << base << ": " << e;
  }
}

TEST(ClipLayerTest, RefusesBadBounds) {
  const char* bad[] = {R"(type: "Clip" clip_param { min: 1 max: 0.5 })",
                       R"(type: "Clip" clip_param { min: 1 })", R"(type: "Clip" clip_param { max: 1 })",
                       R"(type: "Clip")", R"(type: "Clip" clip_param { min: nan max: 1 })"};
  for (const char* text : bad) {
    Blob x(2, 3, 1, 1), y;
    auto layer = CreateLayer(LayerText(text));
    const std::string e = ErrorOf([&] { layer->SetUp({&x}, {&y}); });
    EXPECT_NE(e.find("clip_param"), std::string::npos) << text << ": " << e;
  }
  // min == max is allowed: a constant.
  Blob x(2, 3, 1, 1), y;
  auto layer = CreateLayer(LayerText(R"(type: "Clip" clip_param { min: 0.5 max: 0.5 })"));
  layer->SetUp({&x}, {&y});
}

// ---------------------------------------------------------------- PReLU

pb::LayerParameter PReLUParam(bool shared) {
  pb::LayerParameter p = LayerText(R"(type: "PReLU" prelu_param { filler { type: "uniform" min: -0.5 max: 1.5 } })");
  p.mutable_prelu_param()->set_channel_shared(shared);
  return p;
}

class PReLULayerTest : public ::testing::TestWithParam<bool> {
 protected:
  std::mt19937 gen_{::hogstream::TestSeed()};
};

TEST_P(PReLULayerTest, ForwardMatchesDefinition) {
  const bool shared = GetParam();
  for (const std::vector<int>& shape : {std::vector<int>{2, 3, 4, 5}, std::vector<int>{4, 6}}) {
    Blob x(shape), y;
    test::FillGaussian(&x, gen_);
    auto layer = CreateLayer(PReLUParam(shared));
    layer->SetUp({&x}, {&y});
    ASSERT_EQ(layer->blobs().size(), 1u);
    const Blob& a = *layer->blobs()[0];
    EXPECT_EQ(a.shape(), shared ? std::vector<int>{} : std::vector<int>{shape[1]});
    layer->Forward({&x}, {&y});
    const int inner = x.count(2);
    for (int i = 0; i < x.count(); ++i) {
      const float v = x.cpu_data()[i];
      const float slope = a.cpu_data()[shared ? 0 : (i / inner) % shape[1]];
      EXPECT_FLOAT_EQ(y.cpu_data()[i], v > 0 ? v : slope * v) << i;
    }
  }
}

TEST_P(PReLULayerTest, Gradient) {
  Blob x(2, 3, 4, 5), y;
  test::FillGaussian(&x, gen_);
  auto layer = CreateLayer(PReLUParam(GetParam()));
  layer->SetUp({&x}, {&y});
  test::GradientCheck opt;
  opt.has_kink = true;
  opt.kink_range = 0.02f;
  test::CheckGradients(layer.get(), {&x}, {&y}, opt);  // the input and the slopes
}

// In place (Caffe keeps the input aside): the same tops, input and slope gradients as out of
// place, over two passes with new inputs; slope gradients accumulate over passes.
TEST_P(PReLULayerTest, InPlaceMatchesOutOfPlace) {
  Blob x(2, 3, 4, 5), y, inplace, dy(2, 3, 4, 5);
  auto a = CreateLayer(PReLUParam(GetParam()));
  auto b = CreateLayer(PReLUParam(GetParam()));
  inplace.ReshapeLike(x);
  a->SetUp({&x}, {&y});
  b->SetUp({&inplace}, {&inplace});
  Blob& sa = *a->blobs()[0];
  Blob& sb = *b->blobs()[0];
  copy(sa.count(), sa.cpu_data(), sb.mutable_cpu_data());
  set(sa.count(), 0.f, sa.mutable_cpu_diff());
  set(sb.count(), 0.f, sb.mutable_cpu_diff());
  std::vector<float> first_pass;
  for (int pass = 0; pass < 2; ++pass) {
    test::FillGaussian(&x, gen_);
    test::FillGaussian(&dy, gen_);
    copy(x.count(), x.cpu_data(), inplace.mutable_cpu_data());
    a->Forward({&x}, {&y});
    b->Forward({&inplace}, {&inplace});
    copy(dy.count(), dy.cpu_data(), y.mutable_cpu_diff());
    copy(dy.count(), dy.cpu_data(), inplace.mutable_cpu_diff());
    a->Backward({&y}, {true}, {&x});
    b->Backward({&inplace}, {true}, {&inplace});
    for (int i = 0; i < x.count(); ++i) {
      ASSERT_EQ(inplace.cpu_data()[i], y.cpu_data()[i]) << i;
      ASSERT_EQ(inplace.cpu_diff()[i], x.cpu_diff()[i]) << i;
    }
    for (int j = 0; j < sa.count(); ++j) {
      EXPECT_FLOAT_EQ(sb.cpu_diff()[j], sa.cpu_diff()[j]) << j;
      if (pass == 0) first_pass.push_back(sa.cpu_diff()[j]);
    }
  }
  // The second pass added to the first (and the input gradient did not leak into it).
  double moved = 0;
  for (int j = 0; j < sa.count(); ++j) moved += std::fabs(sa.cpu_diff()[j] - first_pass[j]);
  EXPECT_GT(moved, 0.0);
}

// A net with PReLU in place after a learned layer against the same net out of place (same
// weights and inputs): the same loss and the same gradients for every parameter, the slopes
// and the weights below the PReLU included.
TEST_P(PReLULayerTest, InPlaceInANet) {
  const std::string text = R"(
layer { name: "in" type: "Input" top: "data" top: "target"
        input_param { shape { dim: 3 dim: 2 dim: 3 dim: 3 } shape { dim: 3 dim: 4 } } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
        convolution_param { num_output: 4 kernel_size: 3 pad: 1
          weight_filler { type: "gaussian" std: 0.5 } bias_filler { type: "gaussian" std: 0.5 } } }
layer { name: "act" type: "PReLU" bottom: "conv" top: "ACT"
        prelu_param { filler { type: "uniform" min: 0.1 max: 0.6 } SHARED } }
layer { name: "ip" type: "InnerProduct" bottom: "ACT" top: "ip"
        inner_product_param { num_output: 4 weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "ip" bottom: "target" top: "loss" }
)";
  auto net_text = [&](const std::string& act) {
    std::string t = text;
    for (size_t at; (at = t.find("ACT")) != std::string::npos;) t.replace(at, 3, act);
    t.replace(t.find("SHARED"), 6, GetParam() ? "channel_shared: true" : "");
    return t;
  };
  Net in_place(ParseNetText(net_text("conv"), "prelu"));
  Net apart(ParseNetText(net_text("act"), "prelu"));
  EXPECT_EQ(in_place.top_vecs()[1][0], in_place.top_vecs()[2][0]);  // in place indeed
  EXPECT_NE(apart.top_vecs()[1][0], apart.top_vecs()[2][0]);
  ASSERT_EQ(in_place.num_learnable(), apart.num_learnable());
  ASSERT_EQ(in_place.learnable_params().size(), 5u);  // conv's 2, the slopes, ip's 2
  std::mt19937 gen(::hogstream::TestSeed());
  for (Net* n : {&in_place, &apart}) {
    std::mt19937 same = gen;
    test::FillGaussian(n->input_blobs()[0], same);
    test::FillGaussian(n->input_blobs()[1], same);
  }
  copy(static_cast<int>(in_place.param_buffer_size()), in_place.param_data(), apart.param_data());
  in_place.ClearParamDiffs();
  apart.ClearParamDiffs();
  EXPECT_EQ(in_place.ForwardBackward(), apart.ForwardBackward());
  double total = 0;
  for (size_t i = 0; i < in_place.param_buffer_size(); ++i) {
    ASSERT_EQ(in_place.param_diff()[i], apart.param_diff()[i]) << i;
    total += std::fabs(in_place.param_diff()[i]);
  }
  EXPECT_GT(total, 0.0);
  EXPECT_GT(in_place.learnable_params()[2]->asum_diff(), 0.f);  // the slopes learn
}

INSTANTIATE_TEST_SUITE_P(ChannelShared, PReLULayerTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? "Shared" : "PerChannel";
                         });

// The slope gradient against its sum, added to what the diff held (the solver clears it).
TEST_P(PReLULayerTest, SlopeGradientAddsToTheDiff) {
  const bool shared = GetParam();
  Blob x(2, 3, 4, 5), y;
  test::FillGaussian(&x, gen_);
  auto layer = CreateLayer(PReLUParam(shared));
  layer->SetUp({&x}, {&y});
  layer->Forward({&x}, {&y});
  float* dy = y.mutable_cpu_diff();
  std::normal_distribution<float> nd;
  for (int i = 0; i < y.count(); ++i) dy[i] = nd(gen_);
  Blob& a = *layer->blobs()[0];
  set(a.count(), 0.5f, a.mutable_cpu_diff());
  layer->Backward({&y}, {false}, {&x});
  std::vector<double> want(a.count(), 0.5);
  for (int i = 0; i < x.count(); ++i) {
    const float v = x.cpu_data()[i];
    if (v <= 0) want[shared ? 0 : (i / 20) % 3] += static_cast<double>(dy[i]) * v;
  }
  for (int j = 0; j < a.count(); ++j) EXPECT_NEAR(a.cpu_diff()[j], want[j], 1e-4) << j;
}

TEST(PReLULayerTest, DefaultSlopeIsAQuarterPerChannel) {
  Blob x(2, 3, 2, 2), y;
  auto layer = CreateLayer(LayerText(R"(type: "PReLU")"));
  layer->SetUp({&x}, {&y});
  ASSERT_EQ(layer->blobs().size(), 1u);
  EXPECT_EQ(layer->blobs()[0]->shape(), std::vector<int>{3});  // channel_shared: false
  for (int c = 0; c < 3; ++c) EXPECT_EQ(layer->blobs()[0]->cpu_data()[c], 0.25f);
}

TEST(PReLULayerTest, RefusesBadInputs) {
  Blob one_axis({5}), y;
  auto layer = CreateLayer(LayerText(R"(type: "PReLU")"));
  std::string e = ErrorOf([&] { layer->SetUp({&one_axis}, {&y}); });
  EXPECT_NE(e.find("2 axes"), std::string::npos) << e;
  Blob x(2, 3, 2, 2), other(2, 4, 2, 2);
  auto layer2 = CreateLayer(LayerText(R"(type: "PReLU")"));
  layer2->SetUp({&x}, {&y});
  e = ErrorOf([&] { layer2->Reshape({&other}, {&y}); });
  EXPECT_NE(e.find("channels"), std::string::npos) << e;
}

// ---------------------------------------------------------------- proto: Caffe's schema

TEST(NeuronLayerParams, FieldNumbersAreCaffes) {
  const auto* d = pb::LayerParameter::descriptor();
  const std::pair<const char*, int> fields[] = {
      {"clip_param", 148}, {"elu_param", 140},   {"exp_param", 111},   {"log_param", 134},
      {"power_param", 122}, {"prelu_param", 131}, {"swish_param", 147}, {"threshold_param", 128}};
  for (const auto& [name, number] : fields) {
    ASSERT_NE(d->FindFieldByName(name), nullptr) << name;
    EXPECT_EQ(d->FindFieldByName(name)->number(), number) << name;
  }
  auto number = [](const google::protobuf::Descriptor* m, const char* f) {
    const auto* field = m->FindFieldByName(f);
    return field ? field->number() : -1;
  };
  for (const auto* m : {pb::PowerParameter::descriptor()}) {
    EXPECT_EQ(number(m, "power"), 1);
    EXPECT_EQ(number(m, "scale"), 2);
    EXPECT_EQ(number(m, "shift"), 3);
  }
  for (const auto* m : {pb::ExpParameter::descriptor(), pb::LogParameter::descriptor()}) {
    EXPECT_EQ(number(m, "base"), 1);
    EXPECT_EQ(number(m, "scale"), 2);
    EXPECT_EQ(number(m, "shift"), 3);
  }
  EXPECT_EQ(number(pb::ClipParameter::descriptor(), "min"), 1);
  EXPECT_EQ(number(pb::ClipParameter::descriptor(), "max"), 2);
  EXPECT_EQ(number(pb::ELUParameter::descriptor(), "alpha"), 1);
  EXPECT_EQ(number(pb::SwishParameter::descriptor(), "beta"), 1);
  EXPECT_EQ(number(pb::ThresholdParameter::descriptor(), "threshold"), 1);
  EXPECT_EQ(number(pb::PReLUParameter::descriptor(), "filler"), 1);
  EXPECT_EQ(number(pb::PReLUParameter::descriptor(), "channel_shared"), 2);
}

TEST(NeuronLayerParams, DefaultsAreCaffes) {
  const pb::PowerParameter power;
  EXPECT_EQ(power.power(), 1.f);
  EXPECT_EQ(power.scale(), 1.f);
  EXPECT_EQ(power.shift(), 0.f);
  const pb::ExpParameter exp;
  EXPECT_EQ(exp.base(), -1.f);
  EXPECT_EQ(exp.scale(), 1.f);
  EXPECT_EQ(exp.shift(), 0.f);
  const pb::LogParameter log;
  EXPECT_EQ(log.base(), -1.f);
  EXPECT_EQ(log.scale(), 1.f);
  EXPECT_EQ(log.shift(), 0.f);
  EXPECT_EQ(pb::ThresholdParameter().threshold(), 0.f);
  EXPECT_EQ(pb::ELUParameter().alpha(), 1.f);
  EXPECT_EQ(pb::SwishParameter().beta(), 1.f);
  EXPECT_FALSE(pb::PReLUParameter().channel_shared());
  EXPECT_FALSE(pb::PReLUParameter().has_filler());
}

// A prototxt written for Caffe with every one of these layers parses and runs forward and
// backward (Threshold last, with no gradient asked of it).
TEST(NeuronLayerParams, CaffePrototxtRuns) {
  const char text[] = R"(
name: "neurons"
layer { name: "in" type: "Input" top: "data" input_param { shape { dim: 2 dim: 3 dim: 2 dim: 2 } } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
        inner_product_param { num_output: 6 weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "abs" type: "AbsVal" bottom: "ip" top: "abs" }
layer { name: "pow" type: "Power" bottom: "abs" top: "abs" power_param { power: 2 scale: 0.5 shift: 1 } }
layer { name: "log" type: "Log" bottom: "abs" top: "abs" log_param { base: 2 } }
layer { name: "exp" type: "Exp" bottom: "abs" top: "abs" exp_param { base: 3 scale: -0.5 } }
layer { name: "bnll" type: "BNLL" bottom: "abs" top: "abs" }
layer { name: "clip" type: "Clip" bottom: "abs" top: "abs" clip_param { min: -1 max: 2 } }
layer { name: "swish" type: "Swish" bottom: "abs" top: "abs" swish_param { beta: 1.5 } }
layer { name: "elu" type: "ELU" bottom: "abs" top: "abs" elu_param { alpha: 0.7 } }
layer { name: "prelu" type: "PReLU" bottom: "abs" top: "abs" prelu_param { channel_shared: true } }
layer { name: "step" type: "Threshold" bottom: "abs" top: "step" threshold_param { threshold: 0.4 }
        propagate_down: false }
layer { name: "loss" type: "EuclideanLoss" bottom: "abs" bottom: "step" top: "loss" }
)";
  Net net(ParseNetText(text, "neurons"));
  std::mt19937 gen(::hogstream::TestSeed());
  test::FillGaussian(net.input_blobs()[0], gen);
  net.ClearParamDiffs();
  const float loss = net.ForwardBackward();
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_GT(net.blob_by_name("ip")->asum_diff(), 0.f);  // the gradient reached the bottom
}

}  // namespace
}  // namespace hogstream
