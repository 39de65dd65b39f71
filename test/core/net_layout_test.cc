// Channel-blocked blobs (Net::AssignLayouts, Layer::Layouts): which blobs a residual net holds
// as nChw16c, and the net with them against the same net all NCHW (NetOptions::blocked =
// false): loss, outputs, every parameter gradient, the running statistics and the input
// gradient, over two passes, in TRAIN and in TEST with backward, with and without the ReLUs
// and the Scales' biases; and the blocked net's gradient against central differences.
#include "core/net.hpp"
#include "test/test_seed.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "core/io.hpp"
#include "test/core/gradient_checker.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

std::string Conv(const std::string& name, const std::string& bottom, int out, int stride = 1) {
  return "layer { name: \"" + name + "\" type: \"Convolution\" bottom: \"" + bottom +
         "\" top: \"" + name + "\"\n  convolution_param { num_output: " + std::to_string(out) +
         " kernel_size: 3 pad: 1 stride: " + std::to_string(stride) +
         "\n    weight_filler { type: \"gaussian\" std: 0.2 } bias_filler { type: \"gaussian\" std: 0.5 } } }\n";
}
// BatchNorm -> Scale (-> ReLU), in place on `blob` (the chain FuseLayers fuses).
std::string Chain(const std::string& blob, bool relu, bool bias) {
  std::string t = "layer { name: \"" + blob + "_bn\" type: \"BatchNorm\" bottom: \"" + blob +
                  "\" top: \"" + blob + "\" }\n"
                  "layer { name: \"" + blob + "_scale\" type: \"Scale\" bottom: \"" + blob +
                  "\" top: \"" + blob + "\"\n  scale_param { bias_term: " +
                  (bias ? "true" : "false") +
                  " filler { type: \"gaussian\" mean: 1 std: 0.5 }"
                  " bias_filler { type: \"gaussian\" std: 0.5 } } }\n";
  if (relu)
    t += "layer { name: \"" + blob + "_relu\" type: \"ReLU\" bottom: \"" + blob + "\" top: \"" +
         blob + "\" }\n";
  return t;
}

// conv1 (3 -> 16) and its chain, then a residual block (two 16-channel convolutions with
// their chains, Eltwise SUM with conv1's blob, which the Net splits, a ReLU), a stride-2
// convolution to 32 channels with its chain, global average pooling (blocked in, NCHW out),
// an InnerProduct and a Euclidean loss. 9 x 7 maps: rows are no multiple of 16.
std::string NetText(bool relu, bool bias) {
  std::string t = "name: \"layouts\" force_backward: true\n"
                  "layer { name: \"in\" type: \"Input\" top: \"data\" top: \"target\"\n"
                  "  input_param { shape { dim: 3 dim: 3 dim: 9 dim: 7 } shape { dim: 3 dim: 5 } } }\n";
  t += Conv("c1", "data", 16) + Chain("c1", relu, bias);
  t += Conv("c2a", "c1", 16) + Chain("c2a", relu, bias);
  t += Conv("c2b", "c2a", 16) + Chain("c2b", false, bias);
  t += "layer { name: \"sum\" type: \"Eltwise\" bottom: \"c1\" bottom: \"c2b\" top: \"sum\" }\n";
  if (relu) t += "layer { name: \"sum_relu\" type: \"ReLU\" bottom: \"sum\" top: \"sum\" }\n";
  t += Conv("c3", "sum", 32, 2) + Chain("c3", relu, bias);
  t += "layer { name: \"pool\" type: \"Pooling\" bottom: \"c3\" top: \"pool\"\n"
       "  pooling_param { pool: AVE global_pooling: true } }\n"
       "layer { name: \"ip\" type: \"InnerProduct\" bottom: \"pool\" top: \"ip\"\n"
       "  inner_product_param { num_output: 5 weight_filler { type: \"gaussian\" std: 0.3 } } }\n"
       "layer { name: \"loss\" type: \"EuclideanLoss\" bottom: \"ip\" bottom: \"target\" top: \"loss\" }\n";
  return t;
}

NetOptions Options(pb::Phase phase, bool blocked) {
  NetOptions o;
  o.phase = phase;
  o.blocked = blocked;
  return o;
}

bool Blocked(const Net& net, const std::string& blob) {
  const auto& names = net.blob_names();
  const auto it = std::find(names.begin(), names.end(), blob);
  EXPECT_NE(it, names.end()) << blob;
  return it != names.end() && net.blob_blocked(static_cast<int>(it - names.begin()));
}

// Fresh parameters for `a`, the same in `b` (two builds of one net); every BatchNorm gets
// stored statistics to normalise with in TEST.
void SameRandomParams(Net& a, Net& b, std::mt19937& gen) {
  for (Blob* p : a.learnable_params()) test::FillGaussian(p, gen, 0.f, 0.4f);
  for (const auto& layer : a.layers()) {
    if (std::string(layer->type()) != "BatchNorm") continue;
    test::FillGaussian(layer->blobs()[0].get(), gen);
    test::FillUniform(layer->blobs()[1].get(), gen, 0.5f, 2.f);
    layer->blobs()[2]->mutable_cpu_data()[0] = 1.5f;
  }
  std::copy_n(a.param_data(), a.param_buffer_size(), b.param_data());
}
void SameRandomInputs(Net& a, Net& b, std::mt19937& gen) {
  for (size_t k = 0; k < a.input_blobs().size(); ++k) {
    test::FillGaussian(a.input_blobs()[k], gen);
    std::copy_n(a.input_blobs()[k]->cpu_data(), a.input_blobs()[k]->count(),
                b.input_blobs()[k]->mutable_cpu_data());
  }
}

void ExpectClose(const float* a, const float* b, size_t n, const std::string& what) {
  for (size_t i = 0; i < n; ++i) {
    ASSERT_NEAR(a[i], b[i], 1e-4 * (1 + std::fabs(b[i]))) << what << " " << i;
  }
}

TEST(NetLayout, BlobsBetweenConvolutionsAndChainsAreBlocked) {
  const pb::NetParameter param = ParseNetText(NetText(true, true), "layouts");
  Net net(param, Options(pb::TRAIN, true));
  // conv1's output and everything the residual block joins to it by element-by-element
  // layers, the block's inner blob, and c3 (the pooling reads either layout).
  for (const char* b : {"c1", "c2a", "c2b", "sum", "c3"}) EXPECT_TRUE(Blocked(net, b)) << b;
  // The input, and the pooling's output, which the InnerProduct reads as NCHW; the loss's.
  for (const char* b : {"data", "target", "pool", "ip", "loss"})
    EXPECT_FALSE(Blocked(net, b)) << b;
  Net plain(param, Options(pb::TRAIN, false));
  for (int b = 0; b < static_cast<int>(plain.blobs().size()); ++b)
    EXPECT_FALSE(plain.blob_blocked(b)) << plain.blob_names()[b];
}

// A pooling that reads NCHW writes NCHW (its NCHW-in, blocked-out pass would gather), and so
// does the convolution after it, though both could take the blocked layout.
TEST(NetLayout, PoolingFromNchwKeepsItsTopNchw) {
  const std::string text =
      "name: \"pool_first\"\n"
      "layer { name: \"in\" type: \"Input\" top: \"data\" top: \"target\"\n"
      "  input_param { shape { dim: 2 dim: 16 dim: 8 dim: 8 } shape { dim: 2 dim: 16 dim: 4 dim: 4 } } }\n"
      "layer { name: \"pool\" type: \"Pooling\" bottom: \"data\" top: \"pool\"\n"
      "  pooling_param { pool: MAX kernel_size: 2 stride: 2 } }\n" +
      Conv("c", "pool", 16) +
      "layer { name: \"loss\" type: \"EuclideanLoss\" bottom: \"c\" bottom: \"target\" top: \"loss\" }\n";
  Net net(ParseNetText(text, "pool_first"), Options(pb::TRAIN, true));
  for (const char* b : {"data", "pool", "c"}) EXPECT_FALSE(Blocked(net, b)) << b;
}

TEST(NetLayout, BlockedNetMatchesPlainNet) {
  std::mt19937 gen(::hogstream::TestSeed());
  Context::Get().set_seed(gen());
  for (bool relu : {true, false}) {
    for (bool bias : {true, false}) {
      for (pb::Phase phase : {pb::TRAIN, pb::TEST}) {
        const std::string what = "relu " + std::to_string(relu) + " bias " +
                                 std::to_string(bias) + " phase " + std::to_string(phase);
        const pb::NetParameter param = ParseNetText(NetText(relu, bias), "layouts");
        Net blocked(param, Options(phase, true)), plain(param, Options(phase, false));
        ASSERT_TRUE(Blocked(blocked, "c2a")) << what;
        ASSERT_EQ(blocked.param_buffer_size(), plain.param_buffer_size());
        SameRandomParams(blocked, plain, gen);
        for (int pass = 0; pass < 2; ++pass) {
          SameRandomInputs(blocked, plain, gen);
          blocked.ClearParamDiffs();
          plain.ClearParamDiffs();
          const float lb = blocked.ForwardBackward(), lp = plain.ForwardBackward();
          ASSERT_NEAR(lb, lp, 1e-4 * (1 + std::fabs(lp))) << what;
          const Blob& ib = *blocked.blob_by_name("ip");
          ExpectClose(ib.cpu_data(), plain.blob_by_name("ip")->cpu_data(), ib.count(), what + " ip");
          const Blob& db = *blocked.blob_by_name("data");
          ExpectClose(db.cpu_diff(), plain.blob_by_name("data")->cpu_diff(), db.count(),
                      what + " input gradient");
          ExpectClose(blocked.param_diff(), plain.param_diff(), blocked.param_buffer_size(),
                      what + " parameter gradient");
          ExpectClose(blocked.param_data(), plain.param_data(), blocked.param_buffer_size(),
                      what + " parameter");
        }
      }
    }
  }
}

// A TEST net that runs forward only (the chains keep no normalised copy).
TEST(NetLayout, ForwardOnlyTestNetMatchesPlainNet) {
  std::mt19937 gen(::hogstream::TestSeed());
  pb::NetParameter param = ParseNetText(NetText(true, true), "layouts");
  param.set_force_backward(false);
  Net blocked(param, Options(pb::TEST, true)), plain(param, Options(pb::TEST, false));
  ASSERT_TRUE(Blocked(blocked, "c2a"));
  SameRandomParams(blocked, plain, gen);
  SameRandomInputs(blocked, plain, gen);
  const float lb = blocked.Forward(), lp = plain.Forward();
  EXPECT_NEAR(lb, lp, 1e-4 * (1 + std::fabs(lp)));
  const Blob& ib = *blocked.blob_by_name("ip");
  ExpectClose(ib.cpu_data(), plain.blob_by_name("ip")->cpu_data(), ib.count(), "ip");
}

// Without the ReLUs (whose kinks central differences would cross), batch statistics.
TEST(NetLayout, BlockedGradientMatchesNumeric) {
  std::mt19937 gen(::hogstream::TestSeed());
  Context::Get().set_seed(gen());
  Net net(ParseNetText(NetText(false, true), "layouts"), Options(pb::TRAIN, true));
  ASSERT_TRUE(Blocked(net, "sum"));
  for (Blob* b : net.input_blobs()) test::FillGaussian(b, gen);
  const int checked = test::ExpectNetGradientMatchesNumeric(net, 1e-2f, 7, " (blocked)");
  EXPECT_GT(checked, 1000);
}

}  // namespace
}  // namespace hogstream
