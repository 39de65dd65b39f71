// Tests of transport/frame: a sealed frame parses back whole (plain and keyed); a frame of
// another job, a bad checksum or MAC, a short, oversized or length-mismatched frame, an unknown
// version or frame type, reserved bytes not zero is refused with its reason; and a bounded fuzz loop of over a million random
// and mutated frames never crashes and never accepts anything but an unchanged good frame.
#include "transport/frame.hpp"

#include "base/common.hpp"

#include "test/test_seed.hpp"
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <vector>

namespace hogstream {
namespace HS_UNITY_ID {

constexpr uint32_t kMax = 256;

// The header of a frame of `floats` payload floats from peer 3.
FrameHeader Hdr(uint32_t floats, FrameType type = FrameType::kData) {
  FrameHeader h;
  h.type = type;
  h.source = 3;
  h.length = floats * sizeof(float);
  return h;
}

// A sealed frame with header h, its payload floats i + seq.
std::vector<std::byte> Make(const FrameFormat& fmt, const FrameHeader& h, uint64_t seq = 7) {
  std::vector<std::byte> f(h.length + fmt.overhead());
  float* p = reinterpret_cast<float*>(f.data() + FrameFormat::kHeaderBytes);
  for (uint32_t i = 0; i < h.length / sizeof(float); ++i) p[i] = static_cast<float>(i + seq);
  EXPECT_EQ(fmt.Seal(f.data(), h), f.size());
  return f;
}

// Rewrites byte `at` of an unkeyed frame and seals its checksum again: a frame whose sender
// wrote that byte.
std::vector<std::byte> Rewritten(std::vector<std::byte> f, size_t at, std::byte v) {
  f[at] = v;
  const size_t body = f.size() - FrameFormat::TrailerBytes(false);
  const uint64_t sum = Digest64(f.data(), body);
  std::memcpy(f.data() + body, &sum, sizeof sum);
  return f;
}

std::optional<Reject> Parse(const FrameFormat& fmt, const std::vector<std::byte>& f, FrameHeader* h = nullptr) {
  FrameHeader tmp;
  const std::byte* payload = nullptr;
  return fmt.Parse(f.data(), f.size(), kMax, h ? h : &tmp, &payload);
}

TEST(FrameTest, RoundTripsEveryField) {
  for (bool keyed : {false, true}) {
    JobKey key{};
    key[0] = 42;
    FrameFormat fmt(0xfeedbeef, keyed ? std::optional<JobKey>(key) : std::nullopt);
    for (FrameType type : {FrameType::kData, FrameType::kHeartbeat}) {
      const FrameHeader want = Hdr(type == FrameType::kData ? 5 : 0, type);
      const auto f = Make(fmt, want, 7);
      FrameHeader got;
      const std::byte* payload = nullptr;
      ASSERT_EQ(fmt.Parse(f.data(), f.size(), kMax, &got, &payload), std::nullopt);
      EXPECT_EQ(got.type, want.type);
      EXPECT_EQ(got.source, want.source);
      EXPECT_EQ(got.length, want.length);
      EXPECT_EQ(payload, f.data() + FrameFormat::kHeaderBytes);
      if (want.length) {
        EXPECT_EQ(reinterpret_cast<const float*>(payload)[4], 4.f + 7);
      }
      EXPECT_EQ(fmt.Unpadded(f.data(), f.size()), f.size());
    }
  }
}

TEST(FrameTest, RefusesEachBadFrameWithItsReason) {
  const FrameFormat fmt(1);
  const auto good = Make(fmt, Hdr(4));
  EXPECT_EQ(Parse(FrameFormat(2), good), Reject::kJob);  // another job
  JobKey key{};
  EXPECT_EQ(Parse(FrameFormat(1, key), good), Reject::kJob);  // keyed job, unkeyed frame
  auto f = good;
  f[FrameFormat::kHeaderBytes + 3] ^= std::byte{1};
  EXPECT_EQ(Parse(fmt, f), Reject::kChecksum);
  f = good;
  f.resize(20);
  EXPECT_EQ(Parse(fmt, f), Reject::kShort);
  f = good;
  f.push_back(std::byte{0});
  EXPECT_EQ(Parse(fmt, f), Reject::kLength);  // trailing bytes
  EXPECT_EQ(Parse(fmt, Make(fmt, Hdr(kMax / 4 + 1))), Reject::kLength);  // oversized
  f = good;
  f[4] = std::byte{FrameFormat::kVersion + 1};
  EXPECT_EQ(Parse(fmt, f), Reject::kVersion);
  f = good;
  f[0] = std::byte{'X'};
  EXPECT_EQ(Parse(fmt, f), Reject::kMagic);
  EXPECT_EQ(Parse(fmt, Make(fmt, Hdr(4, static_cast<FrameType>(99)))), Reject::kHeader);  // checksummed, but no type we know
  for (size_t reserved : {6, 18, 19, 24, 31})  // bytes every sender writes zero
    EXPECT_EQ(Parse(fmt, Rewritten(good, reserved, std::byte{1})), Reject::kHeader) << "byte " << reserved;
  EXPECT_EQ(Parse(fmt, Rewritten(good, FrameFormat::kHeaderBytes + 3, std::byte{0x55})), std::nullopt)
      << "the payload is the sender's: any bytes";
  FrameHeader odd = Hdr(4);
  odd.length = 13;  // the payload's bytes are the caller's: any length
  EXPECT_EQ(Parse(fmt, Make(fmt, odd)), std::nullopt);
  // Padding after the trailer (up to 15 bytes) is trimmed by Unpadded; more is not ours.
  auto padded = good;
  padded.resize(good.size() + 15);
  EXPECT_EQ(fmt.Unpadded(padded.data(), padded.size()), good.size());
  padded.resize(good.size() + 16);
  EXPECT_EQ(fmt.Unpadded(padded.data(), padded.size()), padded.size());
  EXPECT_EQ(Parse(fmt, padded), Reject::kLength);
}

TEST(FrameTest, KeyedFramesNeedTheSameKey) {
  const std::string path = ::testing::TempDir() + "/hs_job_key_" + std::to_string(TestSeed());
  std::ofstream(path) << "correct horse battery staple";
  const JobKey key = LoadJobKey(path);
  JobKey other = key;
  other[5] ^= 1;
  const FrameFormat ours(9, key), theirs(9, other);
  const auto f = Make(ours, Hdr(3));
  EXPECT_EQ(Parse(ours, f), std::nullopt);
  EXPECT_EQ(Parse(theirs, f), Reject::kMac);
  EXPECT_EQ(Parse(FrameFormat(9), f), Reject::kJob);  // unkeyed reader, keyed frame
  auto g = f;
  g[FrameFormat::kLengthAt + 2] ^= std::byte{0x10};  // length field: caught as a length, not applied
  EXPECT_NE(Parse(ours, g), std::nullopt);
  g = f;
  g[40] ^= std::byte{0x10};  // a payload byte: only the MAC notices
  EXPECT_EQ(Parse(ours, g), Reject::kMac);
  g = f;
  g[f.size() - 32 + 3] ^= std::byte{1};  // the nonce: the tag was made under another
  EXPECT_EQ(Parse(ours, g), Reject::kMac);
  g = f;
  g[f.size() - 1] ^= std::byte{1};  // the tag
  EXPECT_EQ(Parse(ours, g), Reject::kMac);
  // Each frame has its own nonce: the same frame sealed twice, or by a copy of the format,
  // differs in its trailer, and every one of them is good.
  const FrameFormat copy(ours);
  const auto again = Make(ours, Hdr(3)), copied = Make(copy, Hdr(3));
  EXPECT_NE(again, f);
  EXPECT_NE(copied, f);
  EXPECT_NE(std::vector<std::byte>(copied.end() - 32, copied.end() - 24), std::vector<std::byte>(f.end() - 32, f.end() - 24))
      << "a copy shares the nonces' random half";
  EXPECT_EQ(Parse(ours, again), std::nullopt);
  EXPECT_EQ(Parse(ours, copied), std::nullopt);
  std::remove(path.c_str());
  EXPECT_THROW(LoadJobKey(path), Error);
  std::ofstream(path).close();
  EXPECT_THROW(LoadJobKey(path), Error);  // empty
  std::remove(path.c_str());
}

// >= 1 M frames: random bytes, and good frames (plain and keyed) mutated by bit flips, byte
// writes, truncation, extension and field rewrites. None may crash (ASan build: none may read
// out of bounds); a frame is accepted only if its bytes equal a good frame's. Bounded: 60 s.
TEST(FrameFuzzTest, MillionMutatedFramesNeverCrashOrPass) {
  const uint32_t seed = TestSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  JobKey key{};
  key[1] = 7;
  const FrameFormat plain(77), keyed(77, key);
  std::map<Reject, uint64_t> reasons;
  uint64_t accepted = 0, frames = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  std::vector<std::byte> buf;
  for (; frames < 1'200'000; ++frames) {
    if ((frames & 0xffff) == 0) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << frames;
    }
    const FrameFormat& fmt = (frames & 1) ? keyed : plain;
    const uint32_t floats = static_cast<uint32_t>(rng() % (kMax / 4 + 2));
    const unsigned mutation = rng() % 7;
    FrameHeader hdr = Hdr(floats);
    if (mutation == 6) hdr.type = static_cast<FrameType>(rng() % 4);  // well sealed, but a type that may not exist
    const std::vector<std::byte> good = Make(fmt, hdr, rng());
    buf = good;
    switch (mutation) {
      case 0: {  // pure noise of any length
        buf.resize(rng() % (kMax + 100));
        for (auto& b : buf) b = static_cast<std::byte>(rng());
        break;
      }
      case 1:  // a few bit flips anywhere
        for (int k = 1 + rng() % 3; k > 0; --k) buf[rng() % buf.size()] ^= std::byte{uint8_t(1u << (rng() % 8))};
        break;
      case 2:  // one header byte rewritten (often to the same value)
        buf[rng() % FrameFormat::kHeaderBytes] = static_cast<std::byte>(rng() % 4 == 0 ? rng() : rng() % 8);
        break;
      case 3:  // truncated
        buf.resize(rng() % buf.size());
        break;
      case 4:  // extended
        buf.resize(buf.size() + 1 + rng() % 64, std::byte{0});
        break;
      case 5:  // unchanged
      case 6:
        break;
    }
    FrameHeader h;
    const std::byte* payload = nullptr;
    // Parse from a heap copy of exactly the frame's size, so ASan sees any overread.
    std::unique_ptr<std::byte[]> exact(new std::byte[buf.size() ? buf.size() : 1]);
    std::memcpy(exact.get(), buf.data(), buf.size());
    const auto why = fmt.Parse(exact.get(), buf.size(), kMax, &h, &payload);
    if (why) {
      ++reasons[*why];
    } else {
      ++accepted;
      ASSERT_EQ(buf, good) << "a changed frame was accepted (frame " << frames << ")";
    }
  }
  EXPECT_GE(frames, 1'000'000u);
  EXPECT_GT(accepted, frames / 8);  // the unchanged sixth, and no-op mutations
  for (Reject r : {Reject::kShort, Reject::kMagic, Reject::kVersion, Reject::kJob, Reject::kChecksum,
                   Reject::kMac, Reject::kLength, Reject::kHeader})
    EXPECT_GT(reasons[r], 0u) << RejectName(r);
  std::printf("[  FUZZ    ] %llu frames, %llu accepted, %llu refused\n", (unsigned long long)frames,
              (unsigned long long)accepted, (unsigned long long)(frames - accepted));
}

}  // namespace
}  // namespace hogstream
