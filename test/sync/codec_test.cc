// sync/codec: every encoding on fresh random chunks (odd lengths included): Encode writes back
// exactly what Decode of its payload gives, within each format's error bound of the input;
// the byte counts of the formats; top-k keeps the largest values; malformed payloads and
// settings are refused.
#include "sync/codec.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "base/common.hpp"
#include "test/error_of.hpp"
#include "test/test_seed.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

std::vector<float> Random(uint32_t n, std::mt19937& gen, float scale) {
  std::normal_distribution<float> d(0, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

// Encode, then Decode the payload: the decoded values are what Encode wrote back.
std::vector<float> RoundTrip(const Codec& c, Encoding e, std::vector<float>& x) {
  std::vector<std::byte> out(c.Bytes(e, static_cast<uint32_t>(x.size())) + 16);
  const size_t bytes = c.Encode(e, x.data(), static_cast<uint32_t>(x.size()), out.data());
  EXPECT_EQ(bytes, c.Bytes(e, static_cast<uint32_t>(x.size())));
  std::vector<float> back(x.size());
  EXPECT_TRUE(c.Decode(e, out.data(), bytes, static_cast<uint32_t>(x.size()), back.data()));
  return back;
}

class CodecTest : public testing::TestWithParam<uint32_t> {};

TEST_P(CodecTest, Fp16IsWithinHalfPrecisionAndWritesBackWhatIsDecoded) {
  std::mt19937 gen(TestSeed());
  const uint32_t n = GetParam();
  const Codec c = Codec::Parse("fp16");
  std::vector<float> x = Random(n, gen, 1e-2f);
  const std::vector<float> in = x;
  const std::vector<float> back = RoundTrip(c, Encoding::kFloat16, x);
  EXPECT_EQ(c.Bytes(Encoding::kFloat16, n), 2u * n);
  for (uint32_t i = 0; i < n; ++i) {
    ASSERT_EQ(back[i], x[i]) << i;
    // Half precision: 11 significant bits, subnormals below 6.1e-5 with a step of 6e-8.
    ASSERT_LE(std::fabs(x[i] - in[i]), std::max(std::fabs(in[i]) * 4.9e-4f, 3e-8f)) << i << " " << in[i];
  }
}

TEST_P(CodecTest, Int8IsWithinHalfAStepOfItsBlockScale) {
  std::mt19937 gen(TestSeed());
  const uint32_t n = GetParam();
  const Codec c = Codec::Parse("int8");
  std::vector<float> x = Random(n, gen, 3.f);
  if (n > 70) std::fill(x.begin() + 64, x.begin() + 70, 0.f);  // a block need not be full of values
  const std::vector<float> in = x;
  const std::vector<float> back = RoundTrip(c, Encoding::kInt8, x);
  const uint32_t blocks = (n + 63) / 64;
  EXPECT_EQ(c.Bytes(Encoding::kInt8, n), n + 4u * blocks);
  for (uint32_t b = 0; b < blocks; ++b) {
    float top = 0;
    for (uint32_t i = b * 64; i < std::min(n, b * 64 + 64); ++i) top = std::max(top, std::fabs(in[i]));
    for (uint32_t i = b * 64; i < std::min(n, b * 64 + 64); ++i) {
      ASSERT_EQ(back[i], x[i]) << i;
      ASSERT_LE(std::fabs(x[i] - in[i]), top / 127 * 0.5f * 1.0001f) << i;
    }
  }
}

TEST_P(CodecTest, TopKKeepsExactlyTheLargestValues) {
  std::mt19937 gen(TestSeed());
  const uint32_t n = GetParam();
  const Codec c = Codec::Parse("topk:0.1");
  std::vector<float> x = Random(n, gen, 1.f);
  const std::vector<float> in = x;
  const std::vector<float> back = RoundTrip(c, Encoding::kTopK, x);
  const uint32_t k = static_cast<uint32_t>(std::ceil(0.1f * n));
  EXPECT_EQ(c.Bytes(Encoding::kTopK, n), 8u * k);
  std::vector<float> mags(n);
  for (uint32_t i = 0; i < n; ++i) mags[i] = std::fabs(in[i]);
  std::nth_element(mags.begin(), mags.begin() + (k - 1), mags.end(), std::greater<>());
  const float kth = mags[k - 1];
  uint32_t kept = 0;
  for (uint32_t i = 0; i < n; ++i) {
    ASSERT_EQ(back[i], x[i]) << i;
    if (x[i] != 0) {
      ++kept;
      ASSERT_EQ(x[i], in[i]) << "a kept value travels exactly";
      ASSERT_GE(std::fabs(in[i]), kth) << i;
    } else {
      ASSERT_LE(std::fabs(in[i]), kth) << "a dropped value is not larger than a kept one: " << i;
    }
  }
  EXPECT_EQ(kept, k);
}

INSTANTIATE_TEST_SUITE_P(Lengths, CodecTest, testing::Values(1u, 63u, 64u, 1000u, 16384u));

TEST(CodecBytes, Int8MovesAQuarterOfFloat32) {
  const Codec c = Codec::Parse("int8");
  EXPECT_LE(c.Bytes(Encoding::kInt8, 16384), 0.27 * c.Bytes(Encoding::kFloat32, 16384));
  EXPECT_EQ(c.position, Encoding::kInt8) << "positions are compressed too";
  EXPECT_EQ(Codec::Parse("topk:0.01").position, Encoding::kFloat32) << "a position is not sparse";
  EXPECT_FALSE(Codec::Parse("none").compresses());
  EXPECT_EQ(Codec::Parse("topk:0.25").name(), "topk:0.25");
}

// Values so small that 127 / max overflows (a bias barely moved from 0, a delta that is a few
// denormals) go as zeros, never as NaN (0 * inf); what is lost stays in w - last.
TEST(CodecBytes, Int8OfTinyValuesIsZeroNotNaN) {
  const Codec c = Codec::Parse("int8");
  for (float tiny : {1e-37f, 3e-38f, 1e-40f, 1e-44f}) {
    std::vector<float> x(64, 0.f);
    x[5] = tiny;
    x[9] = -tiny / 2;
    const std::vector<float> back = RoundTrip(c, Encoding::kInt8, x);
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_TRUE(std::isfinite(x[i])) << tiny << " at " << i;
      ASSERT_EQ(back[i], x[i]);
      ASSERT_LE(std::fabs(x[i]), tiny);
    }
  }
}

TEST(CodecDecode, RefusesPayloadsThatAreNotOfItsFormat) {
  std::mt19937 gen(TestSeed());
  std::vector<float> x = Random(100, gen, 1.f), out(100);
  const Codec topk = Codec::Parse("topk:0.1"), int8 = Codec::Parse("int8");
  std::vector<std::byte> buf(1024);
  size_t bytes = topk.Encode(Encoding::kTopK, x.data(), 100, buf.data());
  EXPECT_FALSE(topk.Decode(Encoding::kTopK, buf.data(), bytes - 8, 100, out.data())) << "short";
  reinterpret_cast<uint32_t*>(buf.data())[3] = 100;  // an index past the chunk
  EXPECT_FALSE(topk.Decode(Encoding::kTopK, buf.data(), bytes, 100, out.data()));
  bytes = int8.Encode(Encoding::kInt8, x.data(), 100, buf.data());
  reinterpret_cast<float*>(buf.data())[1] = std::nanf("");
  EXPECT_FALSE(int8.Decode(Encoding::kInt8, buf.data(), bytes, 100, out.data()));
  EXPECT_FALSE(int8.Decode(Encoding::kFloat16, buf.data(), bytes, 100, out.data())) << "another length";
}

TEST(CodecParse, MistakesAreOneLine) {
  for (const char* bad : {"int4", "topk", "topk:", "topk:0", "topk:0.6", "topk:x", "fp16 "}) {
    const std::string e = ErrorOf([&] { Codec::Parse(bad); });
    EXPECT_NE(e.find(std::string("--compress=") + bad), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
}

}  // namespace
}  // namespace hogstream
