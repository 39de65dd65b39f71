// BatchNorm -> Scale (-> ReLU) fusion (Net::FuseLayers): which chains fuse, and a fused net
// against the same net with every layer on its own (NetOptions::fuse = false): outputs, loss,
// running statistics, every parameter gradient and the input gradient, over two passes, in
// TRAIN (batch statistics) and TEST (stored statistics) with backward, with and without the
// ReLU and the bias, with and without a layer below that wants the gradient; and the fused
// net's gradient against central differences.
#include "core/net.hpp"
#include "test/test_seed.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "core/context.hpp"
#include "core/io.hpp"
#include "core/layers/batch_norm_layer.hpp"
#include "test/core/gradient_checker.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

struct Chain {
  bool relu = true, bias = true, conv = true;  // conv: a learned layer below the BatchNorm
  int height = 6, width = 7;                   // spatial 42: one whole lane block and a tail
  bool scale_in_place = true;                  // else the Scale (and the rest) on a new blob
  int scale_axes = 1;                          // 2: one scale per channel and row
  float negative_slope = 0.f;
};

std::string NetText(const Chain& c) {
  const std::string shape = "dim: 3 dim: 4 dim: " + std::to_string(c.height) +
                            " dim: " + std::to_string(c.width);
  std::string t = "name: \"fuse\" force_backward: true\n"
                  "layer { name: \"in\" type: \"Input\" top: \"data\" top: \"target\"\n"
                  "  input_param { shape { " + shape + " } shape { " + shape + " } } }\n";
  std::string blob = "data";
  if (c.conv) {
    t += "layer { name: \"conv\" type: \"Convolution\" bottom: \"data\" top: \"conv\"\n"
         "  convolution_param { num_output: 4 kernel_size: 3 pad: 1\n"
         "    weight_filler { type: \"gaussian\" std: 0.4 } } }\n";
    blob = "conv";
  }
  t += "layer { name: \"bn\" type: \"BatchNorm\" bottom: \"" + blob + "\" top: \"" + blob +
       "\" }\n";
  const std::string in = blob;
  if (!c.scale_in_place) blob = "scaled";
  t += "layer { name: \"scale\" type: \"Scale\" bottom: \"" + in + "\" top: \"" + blob +
       "\"\n  scale_param { num_axes: " + std::to_string(c.scale_axes) +
       " bias_term: " + (c.bias ? "true" : "false") +
       " filler { type: \"gaussian\" mean: 1 std: 0.5 }"
       " bias_filler { type: \"gaussian\" std: 0.5 } } }\n";
  if (c.relu) {
    t += "layer { name: \"relu\" type: \"ReLU\" bottom: \"" + blob + "\" top: \"" + blob +
         "\"\n  relu_param { negative_slope: " + std::to_string(c.negative_slope) + " } }\n";
  }
  t += "layer { name: \"loss\" type: \"EuclideanLoss\" bottom: \"" + blob +
       "\" bottom: \"target\" top: \"loss\" }\n";
  return t;
}

NetOptions Options(pb::Phase phase, bool fuse) {
  NetOptions o;
  o.phase = phase;
  o.fuse = fuse;
  return o;
}

bool Fused(const Net& net) {
  return static_cast<const BatchNormLayer*>(net.layer_by_name("bn"))->fused();
}

void ExpectClose(const float* a, const float* b, size_t n, const std::string& what) {
  for (size_t i = 0; i < n; ++i) {
    ASSERT_NEAR(a[i], b[i], 1e-5 * (1 + std::fabs(b[i]))) << what << " " << i;
  }
}

// Fresh N(0, 1) inputs for `a`, the same ones for `b` (two builds of one net).
void SameRandomInputs(Net& a, Net& b, std::mt19937& gen) {
  for (size_t k = 0; k < a.input_blobs().size(); ++k) {
    test::FillGaussian(a.input_blobs()[k], gen);
    std::copy_n(a.input_blobs()[k]->cpu_data(), a.input_blobs()[k]->count(), b.input_blobs()[k]->mutable_cpu_data());
  }
}

TEST(NetFusion, FusedChainMatchesLayerByLayer) {
  std::mt19937 gen(::hogstream::TestSeed());
  const Chain chains[] = {{}, {false}, {true, false}, {true, true, false}, {true, true, true, 3, 5},
                          {false, false, false, 11, 9}};
  for (const Chain& c : chains) {
    for (pb::Phase phase : {pb::TRAIN, pb::TEST}) {
      const std::string what = "relu " + std::to_string(c.relu) + " bias " +
                               std::to_string(c.bias) + " conv " + std::to_string(c.conv) +
                               " phase " + std::to_string(phase);
      const pb::NetParameter param = ParseNetText(NetText(c), "fuse");
      Net fused(param, Options(phase, true)), plain(param, Options(phase, false));
      ASSERT_TRUE(Fused(fused)) << what;
      ASSERT_FALSE(Fused(plain)) << what;
      ASSERT_EQ(fused.param_buffer_size(), plain.param_buffer_size());
      // Same parameters; in TEST, stored statistics to normalise with.
      for (size_t p = 0; p < fused.learnable_params().size(); ++p)
        test::FillGaussian(fused.learnable_params()[p], gen, 0.5f, 0.5f);
      Blob* sums = fused.layer_by_name("bn")->blobs()[1].get();
      test::FillGaussian(fused.layer_by_name("bn")->blobs()[0].get(), gen);
      test::FillUniform(sums, gen, 0.5f, 2.f);
      fused.layer_by_name("bn")->blobs()[2]->mutable_cpu_data()[0] = 1.5f;
      std::copy_n(fused.param_data(), fused.param_buffer_size(), plain.param_data());
      for (int pass = 0; pass < 2; ++pass) {
        SameRandomInputs(fused, plain, gen);
        fused.ClearParamDiffs();
        plain.ClearParamDiffs();
        const float lf = fused.ForwardBackward(), lp = plain.ForwardBackward();
        EXPECT_NEAR(lf, lp, 1e-5 * (1 + std::fabs(lp))) << what;
        const std::string out = c.conv ? "conv" : "data";
        const Blob& yf = *fused.blob_by_name(out);
        const Blob& yp = *plain.blob_by_name(out);
        ExpectClose(yf.cpu_data(), yp.cpu_data(), yf.count(), what + " output");
        ExpectClose(yf.cpu_diff(), yp.cpu_diff(), yf.count(), what + " gradient below");
        // Every parameter: gradients, and the running statistics the forward updated.
        ExpectClose(fused.param_diff(), plain.param_diff(), fused.param_buffer_size(),
                    what + " parameter gradient");
        ExpectClose(fused.param_data(), plain.param_data(), fused.param_buffer_size(),
                    what + " parameter");
      }
    }
  }
}

TEST(NetFusion, OnlyInPlacePerChannelChainsFuse) {
  auto fuses = [](const Chain& c) { return Fused(Net(ParseNetText(NetText(c), "fuse"))); };
  EXPECT_TRUE(fuses(Chain{}));
  Chain c;
  c.scale_in_place = false;  // the BatchNorm's output would have to be written too
  EXPECT_FALSE(fuses(c));
  c = Chain{};
  c.scale_axes = 2;  // not one scale per channel
  EXPECT_FALSE(fuses(c));
  c = Chain{};
  c.negative_slope = 0.1f;  // a leaky ReLU runs on its own; the BatchNorm and Scale still fuse
  EXPECT_TRUE(fuses(c));
  // Fused and plain nets also agree with the leaky ReLU left out of the chain.
  std::mt19937 gen(::hogstream::TestSeed());
  const pb::NetParameter param = ParseNetText(NetText(c), "fuse");
  Net fused(param, Options(pb::TRAIN, true)), plain(param, Options(pb::TRAIN, false));
  std::copy_n(fused.param_data(), fused.param_buffer_size(), plain.param_data());
  SameRandomInputs(fused, plain, gen);
  fused.ClearParamDiffs();
  plain.ClearParamDiffs();
  EXPECT_NEAR(fused.ForwardBackward(), plain.ForwardBackward(), 1e-4);
  ExpectClose(fused.param_diff(), plain.param_diff(), fused.param_buffer_size(), "leaky");
}

// The fused chain's gradient is the true one: the whole net against central differences, with
// batch statistics. Without the ReLU, whose kinks a step large enough to keep the float
// forward's rounding (amplified by the normalisation) below the tolerance would cross in
// numbers; the fused ReLU's gradient is the layer's own (FusedChainMatchesLayerByLayer).
TEST(NetFusion, FusedGradientMatchesNumeric) {
  std::mt19937 gen(::hogstream::TestSeed());
  Context::Get().set_seed(gen());
  for (bool bias : {false, true}) {
    Chain c;
    c.relu = false;
    c.bias = bias;
    Net net(ParseNetText(NetText(c), "fuse"));
    ASSERT_TRUE(Fused(net));
    for (Blob* b : net.input_blobs()) test::FillGaussian(b, gen);
    const int checked = test::ExpectNetGradientMatchesNumeric(net, 1e-2f, 2, bias ? " (bias)" : " (no bias)");
    EXPECT_GT(checked, 50) << "bias " << bias;
  }
}

}  // namespace
}  // namespace hogstream
