#include "core/lane_sums.hpp"
#include "core/math.hpp"
#include "test/test_seed.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <random>
#include <vector>

namespace hogstream {
namespace HS_UNITY_ID {

std::vector<float> Random(size_t n, std::mt19937& gen) {
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

TEST(Math, GemmMatchesNaiveInEveryForm) {
  std::mt19937 gen(::hogstream::TestSeed());
  const int M = 13, N = 17, K = 11;
  for (int form = 0; form < 4; ++form) {
    const bool ta = form & 1, tb = form & 2;
    auto a = Random(M * K, gen), b = Random(K * N, gen), c = Random(M * N, gen);
    std::vector<float> ref(M * N);
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < N; ++j) {
        double s = 0;
        for (int k = 0; k < K; ++k)
          s += static_cast<double>(ta ? a[k * M + i] : a[i * K + k]) * (tb ? b[j * K + k] : b[k * N + j]);
        ref[i * N + j] = static_cast<float>(0.5 * s + 2.0 * c[i * N + j]);
      }
    gemm(ta ? Trans::Yes : Trans::No, tb ? Trans::Yes : Trans::No, M, N, K, 0.5f, a.data(),
         b.data(), 2.f, c.data());
    for (int i = 0; i < M * N; ++i) ASSERT_NEAR(c[i], ref[i], 1e-4f * (1 + std::fabs(ref[i]))) << form;
  }
}

TEST(Math, GemvBothWays) {
  std::mt19937 gen(::hogstream::TestSeed());
  const int M = 7, N = 9;
  auto a = Random(M * N, gen), x = Random(N, gen), xt = Random(M, gen);
  std::vector<float> y(M), yt(N);
  gemv(Trans::No, M, N, 1.f, a.data(), x.data(), 0.f, y.data());
  gemv(Trans::Yes, M, N, 1.f, a.data(), xt.data(), 0.f, yt.data());
  for (int i = 0; i < M; ++i) {
    double s = 0;
    for (int j = 0; j < N; ++j) s += a[i * N + j] * x[j];
    EXPECT_NEAR(y[i], s, 1e-4);
  }
  for (int j = 0; j < N; ++j) {
    double s = 0;
    for (int i = 0; i < M; ++i) s += a[i * N + j] * xt[i];
    EXPECT_NEAR(yt[j], s, 1e-4);
  }
}

struct LowerCase {
  int c, h, w, kh, kw, ph, pw, sh, sw, dh, dw;
};

std::ostream& operator<<(std::ostream& os, const LowerCase& k) {
  return os << k.c << "x" << k.h << "x" << k.w << " k " << k.kh << "x" << k.kw << " pad " << k.ph
            << "," << k.pw << " s " << k.sh << "," << k.sw << " d " << k.dh << "," << k.dw;
}

class Lowering : public ::testing::TestWithParam<LowerCase> {};

// col2im is the adjoint of im2col: <im2col(x), y> == <x, col2im(y)>; and im2row is the
// transpose of im2col.
TEST_P(Lowering, Col2imIsAdjointAndIm2rowIsTranspose) {
  const LowerCase k = GetParam();
  std::mt19937 gen(::hogstream::TestSeed());
  const int oh = (k.h + 2 * k.ph - (k.dh * (k.kh - 1) + 1)) / k.sh + 1;
  const int ow = (k.w + 2 * k.pw - (k.dw * (k.kw - 1) + 1)) / k.sw + 1;
  const int rows = k.c * k.kh * k.kw, cols = oh * ow;
  auto x = Random(k.c * k.h * k.w, gen), y = Random(rows * cols, gen);
  std::vector<float> col(rows * cols), row(rows * cols), back(x.size(), 0.f);
  im2col(x.data(), k.c, k.h, k.w, k.kh, k.kw, k.ph, k.pw, k.sh, k.sw, k.dh, k.dw, col.data());
  im2row(x.data(), k.c, k.h, k.w, k.kh, k.kw, k.ph, k.pw, k.sh, k.sw, k.dh, k.dw, row.data());
  col2im(y.data(), k.c, k.h, k.w, k.kh, k.kw, k.ph, k.pw, k.sh, k.sw, k.dh, k.dw, back.data());
  double lhs = 0, rhs = 0;
  for (size_t i = 0; i < col.size(); ++i) lhs += static_cast<double>(col[i]) * y[i];
  for (size_t i = 0; i < x.size(); ++i) rhs += static_cast<double>(x[i]) * back[i];
  EXPECT_NEAR(lhs, rhs, 1e-3 * (1 + std::fabs(lhs)));
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) ASSERT_EQ(col[r * cols + c], row[c * rows + r]);
  // Spot-check one lowered value against the definition.
  for (int trial = 0; trial < 50; ++trial) {
    const int r = gen() % rows, c = gen() % cols;
    const int ch = r / (k.kh * k.kw), ki = r / k.kw % k.kh, kj = r % k.kw;
    const int ih = c / ow * k.sh - k.ph + ki * k.dh, iw = c % ow * k.sw - k.pw + kj * k.dw;
    const float want = ih < 0 || ih >= k.h || iw < 0 || iw >= k.w ? 0.f : x[(ch * k.h + ih) * k.w + iw];
    ASSERT_EQ(col[r * cols + c], want);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, Lowering,
                         ::testing::Values(LowerCase{3, 8, 8, 5, 5, 2, 2, 1, 1, 1, 1},
                                           LowerCase{2, 9, 7, 3, 2, 1, 0, 2, 3, 1, 1},
                                           LowerCase{2, 9, 9, 3, 3, 2, 2, 1, 1, 2, 2},
                                           LowerCase{4, 6, 5, 1, 1, 0, 0, 1, 1, 1, 1}));

// LaneSums (dot, asum and the BatchNorm/Scale statistics): every term counted once, in double,
// for lengths below, at and around multiples of the lane count; and two sums at once.
TEST(Math, LaneSumsMatchSerialDoubleSums) {
  std::mt19937 gen(::hogstream::TestSeed());
  std::normal_distribution<float> d(0.5f, 2.f);
  for (int n : {0, 1, 5, 31, 32, 33, 63, 64, 65, 100, 1000, 4099}) {
    std::vector<float> x(n), y(n);
    for (int i = 0; i < n; ++i) x[i] = d(gen), y[i] = d(gen);
    double sx = 0, sxy = 0, sabs = 0;
    for (int i = 0; i < n; ++i) {
      sx += x[i], sxy += static_cast<double>(x[i]) * y[i], sabs += std::fabs(x[i]);
    }
    LaneSums<2> two;
    two.Add(n, [&](int i) {
      return std::array<double, 2>{x[i], static_cast<double>(x[i]) * y[i]};
    });
    LaneSums<1> one;  // in two calls, as BatchNorm adds the N segments of a channel
    one.Add(n / 3, [&](int i) { return static_cast<double>(x[i]); });
    one.Add(n - n / 3, [&](int i) { return static_cast<double>(x[n / 3 + i]); });
    const double tol = 1e-12 * (1 + sabs);
    EXPECT_NEAR(two.Total(0), sx, tol) << n;
    EXPECT_NEAR(two.Total(1), sxy, 1e-12 * (1 + std::fabs(sxy) + n * 16.0)) << n;
    EXPECT_NEAR(one.Total(), sx, tol) << n;
    EXPECT_FLOAT_EQ(dot(n, x.data(), y.data()), static_cast<float>(sxy)) << n;
    EXPECT_FLOAT_EQ(asum(n, x.data()), static_cast<float>(sabs)) << n;
  }
}

// SegmentSums (the BatchNorm's memory-order statistics): every term counted once, into the
// running totals it is given, at lengths around the lane count and past a block (16 x 16
// terms): within a float block's rounding of the double sums.
TEST(Math, SegmentSumsAddEveryTermToTheTotals) {
  std::mt19937 gen(::hogstream::TestSeed());
  std::normal_distribution<float> d(0.5f, 2.f);
  for (int n : {0, 1, 15, 16, 17, 49, 255, 256, 257, 1000, 4099}) {
    std::vector<float> x(n), y(n);
    for (int i = 0; i < n; ++i) x[i] = d(gen), y[i] = d(gen);
    double sx = 0, sxy = 0, sabs = 0, sabsxy = 0;
    for (int i = 0; i < n; ++i) {
      sx += x[i], sxy += static_cast<double>(x[i]) * y[i];
      sabs += std::fabs(x[i]), sabsxy += std::fabs(static_cast<double>(x[i]) * y[i]);
    }
    double totals[2] = {7.0, -3.0};  // added to, not overwritten
    SegmentSums<2>(n, [&](int i) { return std::array<float, 2>{x[i], x[i] * y[i]}; }, totals);
    // a float lane adds at most 16 terms: its rounding is within 16 ulps of the magnitudes
    EXPECT_NEAR(totals[0], 7.0 + sx, 2e-6 * (1 + sabs)) << n;
    EXPECT_NEAR(totals[1], -3.0 + sxy, 2e-6 * (1 + sabsxy)) << n;
  }
}

TEST(Math, ReductionsAccumulateInDouble) {
  std::vector<float> v(1 << 20, 0.1f);
  EXPECT_NEAR(asum(static_cast<int>(v.size()), v.data()), 0.1 * v.size(), 1e-3 * v.size() * 0.1);
  EXPECT_NEAR(dot(static_cast<int>(v.size()), v.data(), v.data()), 0.01 * v.size(), 1e-2);
}


// Every lowering against the definition on padded inputs, where the first windows start left
// of the image (the old im2row formed `line + c0` with c0 < 0 there: a pointer before the
// array, undefined behaviour that UBSan's pointer-overflow check reports).
TEST(Math, PaddedLoweringsMatchNaive) {
  std::mt19937 gen(::hogstream::TestSeed());
  for (const LowerCase& k : {LowerCase{2, 5, 6, 3, 3, 2, 2, 1, 1, 1, 1},
                             LowerCase{3, 7, 7, 3, 5, 1, 3, 2, 2, 1, 1},
                             LowerCase{1, 6, 4, 2, 2, 1, 1, 1, 1, 3, 2}}) {
    const int oh = ConvOutSize(k.h, k.kh, k.ph, k.sh, k.dh);
    const int ow = ConvOutSize(k.w, k.kw, k.pw, k.sw, k.dw);
    const int rows = k.c * k.kh * k.kw, cols = oh * ow;
    auto x = Random(k.c * k.h * k.w, gen);
    std::vector<float> col(rows * cols, 7.f), row(rows * cols, 7.f);
    im2col(x.data(), k.c, k.h, k.w, k.kh, k.kw, k.ph, k.pw, k.sh, k.sw, k.dh, k.dw, col.data());
    im2row(x.data(), k.c, k.h, k.w, k.kh, k.kw, k.ph, k.pw, k.sh, k.sw, k.dh, k.dw, row.data());
    for (int r = 0; r < rows; ++r) {
      const int ch = r / (k.kh * k.kw), ki = r / k.kw % k.kh, kj = r % k.kw;
      for (int c = 0; c < cols; ++c) {
        const int ih = c / ow * k.sh - k.ph + ki * k.dh, iw = c % ow * k.sw - k.pw + kj * k.dw;
        const float want =
            ih < 0 || ih >= k.h || iw < 0 || iw >= k.w ? 0.f : x[(ch * k.h + ih) * k.w + iw];
        ASSERT_EQ(col[r * cols + c], want) << k;
        ASSERT_EQ(row[c * rows + r], want) << k;
      }
    }
  }
}

}  // namespace
}  // namespace hogstream
