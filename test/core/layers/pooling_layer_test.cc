// Pooling: Caffe's output sizes, forward values against a direct per-window reference, the
// argmax top, numerical gradients for MAX and AVE (padded, strided, rectangular, global), and
// parameter errors.
#include "core/layers/pooling_layer.hpp"
#include "test/test_seed.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cstring>
#include <limits>
#include <string>
#include <numeric>

#include "test/core/gradient_checker.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

using PP = pb::PoolingParameter;

struct Config {
  PP::PoolMethod pool;
  int kh, kw, sh, sw, ph, pw;
  PP::RoundMode round = PP::CEIL;
  bool global = false;
};

pb::LayerParameter Param(const Config& c) {
  pb::LayerParameter p;
  p.set_type("Pooling");
  PP* pp = p.mutable_pooling_param();
  pp->set_pool(c.pool);
  pp->set_round_mode(c.round);
  if (c.global) {
    pp->set_global_pooling(true);
    return p;
  }
  pp->set_kernel_h(c.kh);
  pp->set_kernel_w(c.kw);
  pp->set_stride_h(c.sh);
  pp->set_stride_w(c.sw);
  pp->set_pad_h(c.ph);
  pp->set_pad_w(c.pw);
  return p;
}

pb::LayerParameter Square(PP::PoolMethod pool, int kernel, int stride, int pad = 0,
                          PP::RoundMode round = PP::CEIL) {
  pb::LayerParameter p;
  p.set_type("Pooling");
  p.mutable_pooling_param()->set_pool(pool);
  p.mutable_pooling_param()->set_kernel_size(kernel);
  p.mutable_pooling_param()->set_stride(stride);
  if (pad) p.mutable_pooling_param()->set_pad(pad);
  p.mutable_pooling_param()->set_round_mode(round);
  return p;
}

std::vector<int> TopShape(const pb::LayerParameter& p, std::vector<int> in) {
  Blob x(in), y;
  auto layer = CreateLayer(p);
  layer->SetUp({&x}, {&y});
  return y.shape();
}

// Distinct values in random order, at least 0.05 apart, so no max ties near the check step.
void FillDistinct(Blob* b, std::mt19937& gen) {
  std::vector<int> order(b->count());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), gen);
  std::uniform_real_distribution<float> jitter(0.f, 0.01f);
  float* d = b->mutable_cpu_data();
  for (int i = 0; i < b->count(); ++i) d[i] = 0.05f * (order[i] - b->count() / 2) + jitter(gen);
}

TEST(PoolingLayerTest, OutputShapeRoundsLikeCaffe) {
  using V = std::vector<int>;
  EXPECT_EQ(TopShape(Square(PP::MAX, 3, 2), {1, 1, 6, 6}), (V{1, 1, 3, 3}));
  EXPECT_EQ(TopShape(Square(PP::MAX, 3, 2, 0, PP::FLOOR), {1, 1, 6, 6}), (V{1, 1, 2, 2}));
  EXPECT_EQ(TopShape(Square(PP::AVE, 3, 2, 1), {2, 3, 6, 6}), (V{2, 3, 4, 4}));
  // ceil((5 + 2 - 2) / 2) + 1 = 4, but the 4th window would start in the padding.
  EXPECT_EQ(TopShape(Square(PP::MAX, 2, 2, 1), {1, 1, 5, 5}), (V{1, 1, 3, 3}));
  EXPECT_EQ(TopShape(Square(PP::MAX, 2, 2, 1, PP::FLOOR), {1, 1, 5, 5}), (V{1, 1, 3, 3}));
  EXPECT_EQ(TopShape(Square(PP::MAX, 3, 2, 0, PP::FLOOR), {1, 1, 7, 7}), (V{1, 1, 3, 3}));
  EXPECT_EQ(TopShape(Param({PP::AVE, 3, 2, 2, 1, 1, 0}), {1, 2, 7, 5}), (V{1, 2, 4, 4}));
  Config global{PP::AVE, 0, 0, 0, 0, 0, 0};
  global.global = true;
  EXPECT_EQ(TopShape(Param(global), {2, 3, 5, 7}), (V{2, 3, 1, 1}));
}

TEST(PoolingLayerTest, AverageDividesByWindowClippedToPaddedInput) {
  // 3x3 input 1..9, kernel 2, stride 2, pad 1: windows start at -1 and 1, and the divisor
  // counts padding inside the padded extent (4 everywhere here, since H + pad = 4).
  Blob x(1, 1, 3, 3), y;
  for (int i = 0; i < 9; ++i) x.mutable_cpu_data()[i] = static_cast<float>(i + 1);
  auto layer = CreateLayer(Square(PP::AVE, 2, 2, 1));
  layer->SetUp({&x}, {&y});
  layer->Forward({&x}, {&y});
  ASSERT_EQ(y.shape(), (std::vector<int>{1, 1, 2, 2}));
  const float want[] = {1 / 4.f, (2 + 3) / 4.f, (4 + 7) / 4.f, (5 + 6 + 8 + 9) / 4.f};
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(y.cpu_data()[i], want[i]) << i;
}

// Direct per-window pooling, written as Caffe defines it.
void Reference(const Config& c, const Blob& x, std::vector<float>* out, std::vector<int>* arg,
               int oh, int ow) {
  const int H = x.height(), W = x.width();
  const int kh = c.global ? H : c.kh, kw = c.global ? W : c.kw;
  const int sh = c.global ? 1 : c.sh, sw = c.global ? 1 : c.sw;
  const int ph = c.global ? 0 : c.ph, pw = c.global ? 0 : c.pw;
  out->clear();
  arg->clear();
  for (int p = 0; p < x.num() * x.channels(); ++p) {
    const float* in = x.cpu_data() + p * H * W;
    for (int i = 0; i < oh; ++i) {
      for (int j = 0; j < ow; ++j) {
        int hs = i * sh - ph, ws = j * sw - pw;
        int he = std::min(hs + kh, H + ph), we = std::min(ws + kw, W + pw);
        const int size = (he - hs) * (we - ws);
        hs = std::max(hs, 0);
        ws = std::max(ws, 0);
        he = std::min(he, H);
        we = std::min(we, W);
        float best = -FLT_MAX, sum = 0;
        int at = -1;
        for (int h = hs; h < he; ++h) {
          for (int w = ws; w < we; ++w) {
            sum += in[h * W + w];
            if (in[h * W + w] > best) best = in[h * W + w], at = h * W + w;
          }
        }
        out->push_back(c.pool == PP::MAX ? best : sum / size);
        arg->push_back(at);
      }
    }
  }
}

// Runs config c on x into (*tops)[0] (and, MAX, `mask`, appended to the tops); the direct
// loop's outputs and argmaxes go to want / arg. Returns the layer (for Backward).
std::unique_ptr<Layer> ForwardBesideReference(const Config& c, Blob& x, Blobs* tops, Blob* mask,
                                              std::vector<float>* want, std::vector<int>* arg) {
  auto layer = CreateLayer(Param(c));
  if (c.pool == PP::MAX) tops->push_back(mask);
  layer->SetUp({&x}, *tops);
  layer->Forward({&x}, *tops);
  Reference(c, x, want, arg, (*tops)[0]->height(), (*tops)[0]->width());
  return layer;
}

class PoolingConfigTest : public ::testing::TestWithParam<Config> {};

TEST_P(PoolingConfigTest, ForwardMatchesReference) {
  const Config c = GetParam();
  std::mt19937 gen(::hogstream::TestSeed());
  Blob x(2, 3, 9, 8), y, mask;
  test::FillGaussian(&x, gen);
  Blobs tops{&y};
  std::vector<float> want;
  std::vector<int> arg;
  auto layer = ForwardBesideReference(c, x, &tops, &mask, &want, &arg);
  ASSERT_EQ(static_cast<int>(want.size()), y.count());
  for (int i = 0; i < y.count(); ++i) {
    EXPECT_FLOAT_EQ(y.cpu_data()[i], want[i]) << i;
    if (c.pool == PP::MAX) {
      EXPECT_EQ(mask.cpu_data()[i], static_cast<float>(arg[i])) << i;
    }
  }
}

TEST_P(PoolingConfigTest, Gradient) {
  const Config c = GetParam();
  std::mt19937 gen(::hogstream::TestSeed());
  Blob x(2, 2, 7, 6), y;
  FillDistinct(&x, gen);
  PoolingLayer layer(Param(c));
  layer.SetUp({&x}, {&y});
  test::CheckGradients(&layer, {&x}, {&y});
}

Config Global(PP::PoolMethod m) {
  Config c{m, 0, 0, 0, 0, 0, 0};
  c.global = true;
  return c;
}

INSTANTIATE_TEST_SUITE_P(
    Configs, PoolingConfigTest,
    ::testing::Values(Config{PP::MAX, 2, 2, 2, 2, 0, 0}, Config{PP::MAX, 3, 3, 2, 2, 0, 0},
                      Config{PP::MAX, 3, 3, 2, 2, 1, 1}, Config{PP::MAX, 3, 2, 1, 2, 2, 1},
                      Config{PP::MAX, 3, 3, 2, 2, 0, 0, PP::FLOOR},
                      Config{PP::MAX, 2, 2, 2, 2, 1, 1, PP::FLOOR},
                      Config{PP::AVE, 2, 2, 2, 2, 0, 0}, Config{PP::AVE, 3, 3, 2, 2, 0, 0},
                      Config{PP::AVE, 3, 3, 2, 2, 1, 1}, Config{PP::AVE, 3, 2, 1, 2, 2, 1},
                      Config{PP::AVE, 3, 3, 3, 3, 1, 0, PP::FLOOR}, Global(PP::MAX),
                      Global(PP::AVE)));

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// The vectorised paths (phases + flat loop for any kernel, stride and padding; 2x2/2; the
// whole-plane path, 16 planes at a time) against the direct per-window loop, bit for bit, on
// random shapes and values full of ties (a few distinct values), -FLT_MAX, -inf and NaN (for
// MAX: never a winner, so a window holding nothing else keeps mask -1 and gets no gradient).
TEST(PoolingLayerTest, FastPathsMatchDirectLoopsBitForBit) {
  std::mt19937 gen(::hogstream::TestSeed());
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(gen); };
  const float special[] = {-FLT_MAX, -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN()};
  int checked = 0;
  for (int trial = 0; trial < 400; ++trial) {
    Config c{trial % 2 ? PP::AVE : PP::MAX, pick(1, 5), pick(1, 5), pick(1, 4), pick(1, 4),
             0, 0};
    if (trial % 4 < 2) c.kh = c.kw = 3, c.sh = c.sw = pick(1, 2);  // the unrolled 3x3 paths
    if (trial % 13 == 0) c.kh = c.kw = 2, c.sh = c.sw = 2;
    c.ph = pick(0, std::min(2, c.kh - 1));
    c.pw = pick(0, std::min(2, c.kw - 1));
    if (trial % 13 == 0 && trial % 26 != 0) c.ph = c.pw = 0;  // Max2x2
    c.round = pick(0, 1) ? PP::CEIL : PP::FLOOR;
    c.global = trial % 17 == 0;
    const int H = std::max(1, c.kh - 2 * c.ph) + pick(0, 12);
    const int W = std::max(1, c.kw - 2 * c.pw) + pick(0, 12);
    const int planes_n = pick(1, 3), planes_c = pick(1, 13);  // global: 1 to 39 planes
    Blob x(planes_n, planes_c, H, W), y, mask;
    // Ties: values from a small set; for MAX a few never-winning ones.
    const float step = trial % 3 == 0 ? 1.f : 0.25f;
    float* xd = x.mutable_cpu_data();
    for (int i = 0; i < x.count(); ++i) {
      xd[i] = step * static_cast<float>(pick(-3, 3));
      if (c.pool == PP::MAX && pick(0, 9) == 0) xd[i] = special[pick(0, 2)];
    }
    if (c.pool == PP::MAX && trial % 5 == 0) {  // a plane with no winner at all
      for (int i = 0; i < H * W; ++i) xd[i] = special[pick(0, 2)];
    }
    Blobs tops{&y};
    std::vector<float> want;
    std::vector<int> arg;
    auto layer = ForwardBesideReference(c, x, &tops, &mask, &want, &arg);
    ASSERT_EQ(static_cast<int>(want.size()), y.count());
    const std::string what = ::testing::PrintToString(std::vector<int>{
        c.pool, c.kh, c.kw, c.sh, c.sw, c.ph, c.pw, c.round, c.global, H, W});
    for (int i = 0; i < y.count(); ++i) {
      ASSERT_EQ(Bits(y.cpu_data()[i]), Bits(want[i]))
          << "output " << i << ": " << y.cpu_data()[i] << " vs " << want[i] << " for " << what;
      if (c.pool == PP::MAX) {
        ASSERT_EQ(mask.cpu_data()[i], arg[i]) << i << " for " << what;
      }
    }
    // Backward: MAX routes each dy to its argmax (in output order, as the direct loop adds);
    // AVE spreads dy / divisor over the window, each input taking its terms window row by
    // window row and, within one, kernel column by kernel column (outputs right to left).
    float* dy = y.mutable_cpu_diff();
    for (int i = 0; i < y.count(); ++i) dy[i] = static_cast<float>(pick(-8, 8)) / 8.f;
    std::vector<float> dx(x.count(), 0.f);
    const int in_plane = H * W, out_plane = y.height() * y.width();
    if (c.pool == PP::MAX) {
      for (int i = 0; i < y.count(); ++i) {
        if (arg[i] >= 0) dx[i / out_plane * in_plane + arg[i]] += dy[i];
      }
    } else {
      const int kh = c.global ? H : c.kh, kw = c.global ? W : c.kw;
      const int sh = c.global ? 1 : c.sh, sw = c.global ? 1 : c.sw;
      const int ph = c.global ? 0 : c.ph, pw = c.global ? 0 : c.pw;
      for (int r = 0; r < y.count(); ++r) {
        const int i = r / y.width() * y.width() + (y.width() - 1 - r % y.width());
        const int p = i / out_plane, oh = i % out_plane / y.width(), ow = i % y.width();
        const int hs = oh * sh - ph, ws = ow * sw - pw;
        const int he = std::min(hs + kh, H + ph), we = std::min(ws + kw, W + pw);
        const float g = dy[i] / static_cast<float>((he - hs) * (we - ws));
        for (int h = std::max(hs, 0); h < std::min(he, H); ++h) {
          for (int w = std::max(ws, 0); w < std::min(we, W); ++w) dx[p * in_plane + h * W + w] += g;
        }
      }
    }
    layer->Backward(tops, {true}, {&x});
    for (int i = 0; i < x.count(); ++i) {
      ASSERT_EQ(Bits(x.cpu_diff()[i]), Bits(dx[i]))
          << "dx " << i << ": " << x.cpu_diff()[i] << " vs " << dx[i] << " for " << what;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 400);
}

// NCHW <-> nChw16c (channels a multiple of 16), for the blocked layouts below.
std::vector<float> Blocked16(const float* x, int num, int channels, int plane, bool to_blocked) {
  std::vector<float> out(static_cast<size_t>(num) * channels * plane);
  for (int n = 0; n < num; ++n)
    for (int c = 0; c < channels; ++c)
      for (int p = 0; p < plane; ++p) {
        const size_t nchw = (static_cast<size_t>(n) * channels + c) * plane + p;
        const size_t blk = ((static_cast<size_t>(n) * (channels / 16) + c / 16) * plane + p) * 16 + c % 16;
        if (to_blocked) {
          out[blk] = x[nchw];
        } else {
          out[nchw] = x[blk];
        }
      }
  return out;
}

// Channel-blocked input and/or output (Layer::Layouts, pooling_blocked.cpp) against the NCHW
// passes, bit for bit, forward and backward, on random configurations with ties, -FLT_MAX,
// -inf and NaN (as above), 16 or 32 channels.
TEST(PoolingLayerTest, BlockedLayoutsMatchPlainBitForBit) {
  std::mt19937 gen(::hogstream::TestSeed());
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(gen); };
  const float special[] = {-FLT_MAX, -std::numeric_limits<float>::infinity(),
                           std::numeric_limits<float>::quiet_NaN()};
  for (int trial = 0; trial < 120; ++trial) {
    Config c{trial % 2 ? PP::AVE : PP::MAX, pick(1, 5), pick(1, 5), pick(1, 4), pick(1, 4),
             0, 0};
    if (trial % 4 < 2) c.kh = c.kw = 3, c.sh = c.sw = pick(1, 2);  // the unrolled 3x3 paths
    c.ph = pick(0, std::min(2, c.kh - 1));
    c.pw = pick(0, std::min(2, c.kw - 1));
    c.round = pick(0, 1) ? PP::CEIL : PP::FLOOR;
    c.global = trial % 11 == 0;
    const int H = std::max(1, c.kh - 2 * c.ph) + pick(0, 9);
    const int W = std::max(1, c.kw - 2 * c.pw) + pick(0, 9);
    const int N = pick(1, 2), C = 16 * pick(1, 2), plane = H * W;
    Blob x(N, C, H, W), y;
    float* xd = x.mutable_cpu_data();
    for (int i = 0; i < x.count(); ++i) {
      xd[i] = 0.25f * static_cast<float>(pick(-3, 3));
      if (c.pool == PP::MAX && pick(0, 9) == 0) xd[i] = special[pick(0, 2)];
    }
    PoolingLayer plain(Param(c));
    plain.SetUp({&x}, {&y});
    plain.Forward({&x}, {&y});
    const int out_plane = y.height() * y.width();
    float* dy = y.mutable_cpu_diff();
    for (int i = 0; i < y.count(); ++i) dy[i] = static_cast<float>(pick(-8, 8)) / 8.f;
    plain.Backward({&y}, {true}, {&x});
    const std::string what = ::testing::PrintToString(std::vector<int>{
        c.pool, c.kh, c.kw, c.sh, c.sw, c.ph, c.pw, c.round, c.global, N, C, H, W});
    for (const auto& [in_blocked, out_blocked] : {std::pair{true, true}, {true, false}, {false, true}}) {
      const std::string how = what + (in_blocked ? " in blocked" : " in plain") +
                              (out_blocked ? ", out blocked" : ", out plain");
      Blob xb(N, C, H, W), yb;
      const std::vector<float> xin = in_blocked ? Blocked16(xd, N, C, plane, true)
                                                : std::vector<float>(xd, xd + x.count());
      std::copy(xin.begin(), xin.end(), xb.mutable_cpu_data());
      PoolingLayer layer(Param(c));
      layer.SetUp({&xb}, {&yb});
      ASSERT_EQ(yb.shape(), y.shape());
      layer.SetBlocked({in_blocked}, {out_blocked});
      layer.Forward({&xb}, {&yb});
      const std::vector<float> out = out_blocked ? Blocked16(yb.cpu_data(), N, C, out_plane, false)
                                                 : std::vector<float>(yb.cpu_data(), yb.cpu_data() + yb.count());
      for (int i = 0; i < y.count(); ++i)
        ASSERT_EQ(Bits(out[i]), Bits(y.cpu_data()[i])) << "output " << i << " for " << how;
      const std::vector<float> g = out_blocked ? Blocked16(dy, N, C, out_plane, true)
                                               : std::vector<float>(dy, dy + y.count());
      std::copy(g.begin(), g.end(), yb.mutable_cpu_diff());
      layer.Backward({&yb}, {true}, {&xb});
      const std::vector<float> dx = in_blocked ? Blocked16(xb.cpu_diff(), N, C, plane, false)
                                               : std::vector<float>(xb.cpu_diff(), xb.cpu_diff() + xb.count());
      for (int i = 0; i < x.count(); ++i)
        ASSERT_EQ(Bits(dx[i]), Bits(x.cpu_diff()[i])) << "dx " << i << " for " << how;
    }
  }
}

TEST(PoolingLayerTest, MaxGradientWithMaskTop) {
  std::mt19937 gen(::hogstream::TestSeed());
  Blob x(2, 2, 6, 6), y, mask;
  FillDistinct(&x, gen);
  PoolingLayer layer(Square(PP::MAX, 3, 2, 1));
  layer.SetUp({&x}, {&y, &mask});
  test::CheckGradients(&layer, {&x}, {&y, &mask});
}

TEST(PoolingLayerTest, BadParametersAreErrors) {
  Blob x(1, 2, 6, 6), y, z, w;
  auto expect_error = [&](const pb::LayerParameter& p, Blobs tops = {}) {
    if (tops.empty()) tops = {&y};
    auto layer = CreateLayer(p);
    EXPECT_THROW(layer->SetUp({&x}, tops), Error);
  };
  expect_error(Square(PP::STOCHASTIC, 2, 2));
  expect_error(Square(PP::MAX, 2, 1, 2));  // pad >= kernel
  expect_error(Square(PP::AVE, 3, 1, 3));
  expect_error(Square(PP::AVE, 2, 2), {&y, &z});      // mask top only for MAX
  expect_error(Square(PP::MAX, 2, 2), {&y, &z, &w});  // at most two tops
  pb::LayerParameter p = Square(PP::MAX, 2, 2);
  p.mutable_pooling_param()->set_kernel_h(2);
  expect_error(p);  // kernel_size and kernel_h
  p = Square(PP::MAX, 2, 2);
  p.mutable_pooling_param()->clear_kernel_size();
  p.mutable_pooling_param()->set_kernel_h(2);
  expect_error(p);  // kernel_h without kernel_w
  p.mutable_pooling_param()->clear_kernel_h();
  expect_error(p);  // no kernel at all
  Config g = Global(PP::AVE);
  p = Param(g);
  p.mutable_pooling_param()->set_pad(1);
  expect_error(p);
  p = Param(g);
  p.mutable_pooling_param()->set_stride(2);
  expect_error(p);
  p = Param(g);
  p.mutable_pooling_param()->set_kernel_size(2);
  expect_error(p);
  expect_error(Square(PP::MAX, 7, 1));  // kernel larger than the input
  Blob x3({2, 3, 4});
  auto layer = CreateLayer(Square(PP::MAX, 2, 2));
  EXPECT_THROW(layer->SetUp({&x3}, {&y}), Error);
}

}  // namespace
}  // namespace hogstream
