// Tests of transport/inproc: delivery in order with intact headers and payloads, batches out of
// Poll and Release(n), no blocking when full, the length check before the copy, a two-thread
// run, and a closed peer latching "peer down".
#include "transport/inproc/device.hpp"

#include "base/common.hpp"
#include "test/transport/transport_test_util.hpp"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace hogstream {
namespace HS_UNITY_ID {

Header Hdr(MsgKind kind, uint32_t chunk, uint64_t seq, size_t floats) {
  Header h;
  h.kind = kind;
  h.chunk = chunk;
  h.seq = seq;
  h.length = static_cast<uint32_t>(floats * sizeof(float));
  return h;
}

using test::Post;

// The sync message a packet holds (the tests send sync's messages: transport_test_util.hpp).
Message M(const Packet& p) { return MessageOf(p); }
std::vector<float> Floats(const Packet& p) {
  const Message m = M(p);
  return {m.floats(), m.floats() + m.float_count()};
}

InprocDevice::Pair Pair(uint32_t floats, uint32_t slots) {
  InprocOptions o;
  o.max_payload = kWireHeaderBytes + floats * sizeof(float);
  o.slots = slots;
  return InprocDevice::MakePair(o);
}

TEST(InprocTransportTest, DeliversInOrderBothWaysNamingTheSource) {
  auto [a, b] = Pair(16, 4);
  EXPECT_EQ(a->self(), 0);
  EXPECT_EQ(b->self(), 1);
  EXPECT_GE(a->caps().alignment, 16u);
  std::vector<float> p1{1, 2, 3}, p2{4, 5};
  ASSERT_TRUE(Post(*a, Dest::Peer(1), Hdr(MsgKind::kPosition, 7, 1, 3), p1.data()));
  ASSERT_TRUE(Post(*a, Dest::Group(0), Hdr(MsgKind::kPosition, 8, 2, 2), p2.data()));
  ASSERT_TRUE(Post(*b, Dest::Peer(0), Hdr(MsgKind::kDelta, 9, 3, 2), p2.data()));
  Packet m[4];
  ASSERT_EQ(a->Poll(m, 4), 1u);  // a receives only what b sent
  EXPECT_EQ(M(m[0]).h.kind, MsgKind::kDelta);
  EXPECT_EQ(m[0].source, 1);
  EXPECT_EQ(M(m[0]).h.chunk, 9u);
  EXPECT_EQ(M(m[0]).h.seq, 3u);
  a->Release(1);
  ASSERT_EQ(b->Poll(m, 4), 2u);  // one batch
  EXPECT_EQ(M(m[0]).h.chunk, 7u);
  EXPECT_EQ(m[0].source, 0);
  EXPECT_EQ(Floats(m[0]), p1);
  EXPECT_EQ(M(m[1]).h.chunk, 8u);
  EXPECT_EQ(Floats(m[1]), p2);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(m[1].payload) % b->caps().alignment, 0u);
  b->Release(2);
  EXPECT_EQ(b->Poll(m, 4), 0u);
  EXPECT_EQ(a->counters().sent, 2u);
  EXPECT_EQ(b->counters().received, 2u);
  EXPECT_EQ(b->counters().bytes_received, 20u + 2 * kWireHeaderBytes);  // the transport counts whole payloads
}

TEST(InprocTransportTest, ReleaseHandsBackTheOldestFirst) {
  auto [a, b] = Pair(4, 3);
  std::vector<float> p{1};
  for (uint64_t s = 1; s <= 3; ++s) ASSERT_TRUE(Post(*a, Dest::Peer(1), Hdr(MsgKind::kDelta, 0, s, 1), p.data()));
  Packet m[3];
  ASSERT_EQ(b->Poll(m, 2), 2u);
  ASSERT_EQ(b->Poll(m + 2, 1), 1u);  // polling again while holding two
  EXPECT_EQ(M(m[2]).h.seq, 3u);
  EXPECT_EQ(a->AcquireSend(), nullptr);  // all three held by the receiver
  b->Release(1);                        // the oldest: seq 1's slot
  ASSERT_NE(a->AcquireSend(), nullptr);
  EXPECT_EQ(M(m[1]).h.seq, 2u);  // the others are still valid
  EXPECT_THROW(b->Release(3), Bug);
  b->Release(2);
}

TEST(InprocTransportTest, PostSendReturnsFalseWhenFull) {
  auto [a, b] = Pair(8, 3);
  std::vector<float> p{1, 2};
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Post(*a, Dest::Peer(1), Hdr(MsgKind::kPosition, 0, i + 1, 2), p.data()));
  EXPECT_FALSE(Post(*a, Dest::Peer(1), Hdr(MsgKind::kPosition, 0, 4, 2), p.data()));  // no room
  EXPECT_EQ(a->AcquireSend(), nullptr);
  EXPECT_GE(a->counters().send_full, 2u);
  Packet m;
  ASSERT_EQ(b->Poll(&m, 1), 1u);
  EXPECT_EQ(a->AcquireSend(), nullptr);  // still held by the receiver until Release
  b->Release(1);
  std::byte* s = a->AcquireSend();
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(a->AcquireSend(), s);  // acquiring again before commit gives the same slot
  reinterpret_cast<float*>(s + kWireHeaderBytes)[0] = 42;
  test::Commit(*a, s, Dest::Peer(1), Hdr(MsgKind::kPosition, 5, 9, 1));
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(b->Poll(&m, 1), 1u);
    b->Release(1);
  }
  EXPECT_EQ(M(m).h.seq, 9u);
  EXPECT_EQ(M(m).floats()[0], 42.f);
}

TEST(InprocTransportTest, TwoThreadsNoLossInOrder) {
  const uint64_t kCount = 200000;
  auto [a, b] = Pair(3, 4);
  std::thread producer([&, a = a.get()] {
    for (uint64_t s = 1; s <= kCount;) {
      std::byte* slot = a->AcquireSend();
      if (!slot) {
        std::this_thread::yield();
        continue;
      }
      float* f = reinterpret_cast<float*>(slot + kWireHeaderBytes);
      f[0] = static_cast<float>(s % 1000);
      f[1] = 1;
      f[2] = -static_cast<float>(s % 1000);
      test::Commit(*a, slot, Dest::Peer(1), Hdr(MsgKind::kPosition, static_cast<uint32_t>(s % 17), s, 3));
      a->Flush();
      ++s;
    }
  });
  uint64_t expect = 1, bad = 0;
  Packet m[4];
  while (expect <= kCount) {
    const size_t n = b->Poll(m, 4);
    if (n == 0) {
      std::this_thread::yield();
      continue;
    }
    for (size_t i = 0; i < n; ++i, ++expect) {
      const float* f = M(m[i]).floats();
      bad += M(m[i]).h.seq != expect || M(m[i]).h.chunk != expect % 17 || M(m[i]).float_count() != 3 ||
             f[0] != static_cast<float>(expect % 1000) || f[2] != -f[0];
    }
    b->Release(n);
  }
  producer.join();
  EXPECT_EQ(bad, 0u);
}

// An over-long message is refused before anything is copied into the slot (the copy used to
// come first: a heap overflow under ASan), and nothing goes out.
TEST(InprocTransportTest, OverlongPostSendIsRefusedBeforeCopying) {
  auto [a, b] = Pair(16, 2);
  std::vector<float> big(4096, 7.f);
  EXPECT_THROW(a->PostSend(Dest::Peer(1), big.data(), static_cast<uint32_t>(big.size() * sizeof(float))), Bug);
  Packet m;
  EXPECT_EQ(b->Poll(&m, 1), 0u);
  std::vector<float> ok(16, 1.f);
  ASSERT_TRUE(Post(*a, Dest::Peer(1), Hdr(MsgKind::kPosition, 0, 2, 16), ok.data()));
  ASSERT_EQ(b->Poll(&m, 1), 1u);
  EXPECT_EQ(M(m).h.seq, 2u);
  EXPECT_EQ(Floats(m), ok);
  b->Release(1);
}

TEST(InprocTransportTest, ClosedPeerLatchesPeerDown) {
  auto [a, b] = Pair(4, 2);
  EXPECT_TRUE(a->status().ok());
  b.reset();
  const Status s = a->status();
  EXPECT_EQ(s.code, Status::kPeerDown);
  EXPECT_EQ(s.peer, 1);
  EXPECT_FALSE(s.what.empty());
}

TEST(InprocTransportTest, DeviceOpensEachPeerOnce) {
  InprocDevice d(InprocOptions{});
  auto a = d.Open(0);
  EXPECT_THROW(d.Open(0), Error);
  EXPECT_THROW(d.Open(2), Error);
  EXPECT_THROW(a->Register(nullptr, 0, MemoryKind::kDevice), Error);
  a->Register(nullptr, 0, MemoryKind::kHost);
}

}  // namespace
}  // namespace hogstream
