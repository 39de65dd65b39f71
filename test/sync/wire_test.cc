// Tests of sync/wire: sync's header round-trips every field on fresh random values; a payload
// that is not one of sync's messages (short, unknown kind or encoding, float32 values that are
// not whole floats, reserved bytes set) is refused; a Wire over a real transport hands out only
// sync's messages, counts the others, and gives every slot back in order (the transport's
// slots all free again afterwards); FaultsOn picks messages by kind.
#include "sync/wire.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "base/common.hpp"
#include "test/test_seed.hpp"
#include "transport/inproc/device.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

Header RandomHeader(std::mt19937_64& rng) {
  Header h;
  const MsgKind kinds[] = {MsgKind::kPosition, MsgKind::kDelta, MsgKind::kIteration, MsgKind::kFactors, MsgKind::kFinal};
  h.kind = kinds[rng() % std::size(kinds)];
  h.encoding = static_cast<Encoding>(1 + rng() % kMaxEncoding);
  h.epoch = static_cast<uint32_t>(rng());
  h.chunk = static_cast<uint32_t>(rng());
  h.seq = rng();
  h.clock = rng();
  h.length = static_cast<uint32_t>(rng() % 64) * 4;
  return h;
}

TEST(WireTest, TheHeaderRoundTripsEveryField) {
  const uint32_t seed = TestSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  std::vector<std::byte> buf(kWireHeaderBytes + 256);
  for (int i = 0; i < 1000; ++i) {
    const Header want = RandomHeader(rng);
    PutHeader(buf.data(), want);
    Header got;
    ASSERT_TRUE(GetHeader(buf.data(), kWireHeaderBytes + want.length, 5, &got));
    EXPECT_EQ(got.kind, want.kind);
    EXPECT_EQ(got.encoding, want.encoding);
    EXPECT_EQ(got.epoch, want.epoch);
    EXPECT_EQ(got.chunk, want.chunk);
    EXPECT_EQ(got.seq, want.seq);
    EXPECT_EQ(got.clock, want.clock);
    EXPECT_EQ(got.length, want.length);
    EXPECT_EQ(got.source, 5) << "the source is the transport's, never the payload's";
  }
}

TEST(WireTest, APayloadThatIsNoSyncMessageIsRefused) {
  std::vector<std::byte> buf(kWireHeaderBytes + 16);
  Header h;
  h.kind = MsgKind::kDelta;
  h.length = 16;
  PutHeader(buf.data(), h);
  Header got;
  got.seq = 77;
  ASSERT_TRUE(GetHeader(buf.data(), static_cast<uint32_t>(buf.size()), 0, &got));
  got.seq = 77;
  EXPECT_FALSE(GetHeader(buf.data(), kWireHeaderBytes - 1, 0, &got));  // short
  EXPECT_EQ(got.seq, 77u) << "a refused header left *h changed";
  EXPECT_FALSE(GetHeader(buf.data(), kWireHeaderBytes + 13, 0, &got));  // float32: not whole floats
  auto with = [&](size_t at, uint8_t v) {
    std::vector<std::byte> b = buf;
    b[at] = std::byte{v};
    return GetHeader(b.data(), static_cast<uint32_t>(b.size()), 0, &got);
  };
  EXPECT_FALSE(with(0, 0));    // no kind
  EXPECT_FALSE(with(0, 99));   // an unknown kind
  EXPECT_FALSE(with(1, 0));    // no encoding
  EXPECT_FALSE(with(1, kMaxEncoding + 1));
  EXPECT_FALSE(with(2, 1));    // reserved
  EXPECT_FALSE(with(13, 1));   // reserved
  EXPECT_TRUE(with(1, static_cast<uint8_t>(Encoding::kInt8)));
  h.encoding = Encoding::kInt8;  // compressed values need not be whole floats
  PutHeader(buf.data(), h);
  EXPECT_TRUE(GetHeader(buf.data(), kWireHeaderBytes + 13, 0, &got));
}

// Over an inproc pair: sync's messages with foreign payloads between them. Poll hands out only
// sync's, counts the rest, and Release gives back every slot in order: afterwards all the
// sender's slots are free again (it can fill them all once more).
TEST(WireTest, AWireHandsOutOnlySyncMessagesAndGivesEverySlotBack) {
  const uint32_t seed = TestSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  InprocOptions o;
  o.max_payload = kWireHeaderBytes + 64;
  o.slots = 16;  // a round's 8 and the foreign ones of the last round not yet polled
  auto [a, b] = InprocDevice::MakePair(o);
  Wire wa(a.get()), wb(b.get());
  EXPECT_EQ(wa.caps().max_payload, 64u);
  uint64_t seq = 0, foreign = 0;
  std::vector<uint64_t> got;
  for (int round = 0; round < 200; ++round) {
    std::vector<uint64_t> sent;
    const int n = 1 + static_cast<int>(rng() % 8);
    for (int i = 0; i < n; ++i) {
      if (rng() % 3 == 0) {  // a payload of someone else's: garbage, or too short to be ours
        std::vector<std::byte> junk(rng() % 40);
        for (auto& x : junk) x = std::byte{static_cast<uint8_t>(200 + rng() % 50)};
        ASSERT_TRUE(a->PostSend(Dest::Peer(1), junk.data(), static_cast<uint32_t>(junk.size())));
        ++foreign;
        continue;
      }
      Header h;
      h.kind = MsgKind::kDelta;
      h.seq = ++seq;
      h.length = 8;
      const float v[2] = {static_cast<float>(seq), -static_cast<float>(seq)};
      ASSERT_TRUE(wa.PostSend(Dest::Peer(1), h, v));
      sent.push_back(seq);
    }
    // Take them in random batches; release each batch whole, sometimes in two parts.
    std::vector<uint64_t> seen;
    for (int tries = 0; tries < 100 && seen.size() < sent.size(); ++tries) {
      Message m[8];
      const size_t k = wb.Poll(m, 1 + rng() % 8);
      for (size_t i = 0; i < k; ++i) {
        EXPECT_EQ(m[i].floats()[0], static_cast<float>(m[i].h.seq));
        EXPECT_EQ(m[i].floats()[1], -static_cast<float>(m[i].h.seq));
        EXPECT_EQ(m[i].h.source, 0);
        seen.push_back(m[i].h.seq);
      }
      const size_t first = k ? rng() % (k + 1) : 0;
      wb.Release(first);
      wb.Release(k - first);
    }
    EXPECT_EQ(seen, sent);
    got.insert(got.end(), seen.begin(), seen.end());
  }
  Message m[8];
  EXPECT_EQ(wb.Poll(m, 8), 0u);  // the trailing foreign ones are gone too
  EXPECT_EQ(wb.malformed(), foreign);
  EXPECT_EQ(got.size(), seq);
  for (uint32_t i = 0; i < o.slots; ++i) {
    ASSERT_NE(a->AcquireSend(), nullptr) << "slot " << i << " never came back";
    a->CommitSend(Dest::Peer(1), 0);
  }
  EXPECT_THROW(wb.Release(1), Bug);  // nothing of sync's is held
}

TEST(WireTest, FaultsOnPicksMessagesByKind) {
  const auto deltas = FaultsOn(KindBit(MsgKind::kDelta));
  std::vector<std::byte> buf(kWireHeaderBytes);
  Header h;
  h.kind = MsgKind::kDelta;
  PutHeader(buf.data(), h);
  EXPECT_TRUE(deltas(buf.data(), kWireHeaderBytes));
  h.kind = MsgKind::kPosition;
  PutHeader(buf.data(), h);
  EXPECT_FALSE(deltas(buf.data(), kWireHeaderBytes));
  EXPECT_FALSE(deltas(buf.data(), 3));  // too short to say
  buf[0] = std::byte{200};                // a payload of someone else's (no shift past 31 bits)
  EXPECT_FALSE(deltas(buf.data(), kWireHeaderBytes));
}

}  // namespace
}  // namespace hogstream
