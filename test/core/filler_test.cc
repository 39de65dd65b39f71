#include "core/filler.hpp"
#include "test/test_seed.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "core/context.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

struct Stats {
  double mean = 0, var = 0, min = 1e30, max = -1e30;
};
Stats Measure(const Blob& b) {
  Stats s;
  for (int i = 0; i < b.count(); ++i) {
    const double v = b.cpu_data()[i];
    s.mean += v;
    s.min = std::min(s.min, v);
    s.max = std::max(s.max, v);
  }
  s.mean /= b.count();
  for (int i = 0; i < b.count(); ++i) s.var += std::pow(b.cpu_data()[i] - s.mean, 2);
  s.var /= b.count();
  return s;
}

pb::FillerParameter F(const std::string& type) {
  pb::FillerParameter p;
  p.set_type(type);
  return p;
}

class FillerTest : public ::testing::Test {
 protected:
  void SetUp() override { Context::Get().set_seed(::hogstream::TestSeed()); }
  Blob blob_{std::vector<int>{200, 10, 5, 5}};  // fan_in 250, fan_out 5000
};

TEST_F(FillerTest, Constant) {
  auto p = F("constant");
  p.set_value(0.25f);
  Fill(p, &blob_);
  const Stats s = Measure(blob_);
  EXPECT_EQ(s.min, 0.25);
  EXPECT_EQ(s.max, 0.25);
}

TEST_F(FillerTest, Uniform) {
  auto p = F("uniform");
  p.set_min(-3);
  p.set_max(5);
  Fill(p, &blob_);
  const Stats s = Measure(blob_);
  EXPECT_GE(s.min, -3);
  EXPECT_LE(s.max, 5);
  EXPECT_NEAR(s.mean, 1, 0.05);
  EXPECT_NEAR(s.var, 64.0 / 12, 0.1);
}

TEST_F(FillerTest, Gaussian) {
  auto p = F("gaussian");
  p.set_mean(1.5f);
  p.set_std(0.5f);
  Fill(p, &blob_);
  const Stats s = Measure(blob_);
  EXPECT_NEAR(s.mean, 1.5, 0.01);
  EXPECT_NEAR(std::sqrt(s.var), 0.5, 0.01);
}

TEST_F(FillerTest, SparseGaussianKeepsTheExpectedFraction) {
  auto p = F("gaussian");
  p.set_sparse(20);  // of 200 outputs: keep 10%
  Fill(p, &blob_);
  int nonzero = 0;
  for (int i = 0; i < blob_.count(); ++i) nonzero += blob_.cpu_data()[i] != 0.f;
  EXPECT_NEAR(static_cast<double>(nonzero) / blob_.count(), 0.1, 0.01);
}

TEST_F(FillerTest, XavierAndMsraUseFans) {
  Fill(F("xavier"), &blob_);
  Stats s = Measure(blob_);
  // The bound as the filler computes it, in float (as Caffe does): a sample can be exactly -lim,
  // which the double sqrt(3 / 250) would put half an ulp out of range.
  const double lim = std::sqrt(3.f / 250.f);
  EXPECT_LE(s.max, lim);
  EXPECT_GE(s.min, -lim);
  EXPECT_NEAR(s.var, lim * lim / 3, lim * lim / 3 * 0.05);
  auto p = F("xavier");
  p.set_variance_norm(pb::FillerParameter::FAN_OUT);
  Fill(p, &blob_);
  EXPECT_LE(Measure(blob_).max, std::sqrt(3.0 / 5000));
  Fill(F("msra"), &blob_);
  EXPECT_NEAR(Measure(blob_).var, 2.0 / 250, 2.0 / 250 * 0.05);
  p = F("msra");
  p.set_variance_norm(pb::FillerParameter::AVERAGE);
  Fill(p, &blob_);
  EXPECT_NEAR(Measure(blob_).var, 2.0 / 2625, 2.0 / 2625 * 0.05);
}

TEST_F(FillerTest, BilinearIsTheUpsamplingKernel) {
  Blob k(std::vector<int>{2, 1, 4, 4});
  Fill(F("bilinear"), &k);
  // factor 2: the 1-d kernel is (0.25, 0.75, 0.75, 0.25).
  const float w[4] = {0.25f, 0.75f, 0.75f, 0.25f};
  for (int n = 0; n < 2; ++n)
    for (int y = 0; y < 4; ++y)
      for (int x = 0; x < 4; ++x) EXPECT_FLOAT_EQ(k.cpu_data()[k.offset(n, 0, y, x)], w[y] * w[x]);
}

TEST_F(FillerTest, PositiveUnitballRowsSumToOne) {
  Blob b(std::vector<int>{7, 3, 4});
  Fill(F("positive_unitball"), &b);
  for (int r = 0; r < 7; ++r) {
    double s = 0;
    for (int j = 0; j < 12; ++j) {
      EXPECT_GE(b.cpu_data()[r * 12 + j], 0.f);
      s += b.cpu_data()[r * 12 + j];
    }
    EXPECT_NEAR(s, 1.0, 1e-5);
  }
}

TEST_F(FillerTest, UnknownTypeIsAnError) {
  EXPECT_THROW(Fill(F("glorot"), &blob_), Error);
  auto p = F("uniform");
  p.set_min(2);
  p.set_max(1);
  EXPECT_THROW(Fill(p, &blob_), Error);
}

}  // namespace
}  // namespace hogstream
