// Tests of sync/inproc_transport: delivery in order with intact headers and payloads, no
// blocking when full, fault counters that match what the receiver saw, and a two-thread run.
#include "sync/inproc_transport.hpp"

#include "core/common.hpp"

#include "test/test_seed.hpp"
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <thread>
#include <vector>

namespace hogstream {
namespace {

Message Msg(MsgKind kind, uint32_t chunk, uint64_t seq, const std::vector<float>& p) {
  return Message{kind, chunk, seq, static_cast<uint32_t>(p.size()), p.data()};
}

TEST(InprocTransportTest, DeliversInOrderBothWays) {
  auto [a, b] = InprocTransport::MakePair(16, 4);
  std::vector<float> p1{1, 2, 3}, p2{4, 5};
  ASSERT_TRUE(a->PostSend(Msg(MsgKind::kPosition, 7, 1, p1)));
  ASSERT_TRUE(a->PostSend(Msg(MsgKind::kPosition, 8, 2, p2)));
  ASSERT_TRUE(b->PostSend(Msg(MsgKind::kDelta, 9, 3, p2)));
  Message m;
  ASSERT_TRUE(a->Poll(&m));  // a receives only what b sent
  EXPECT_EQ(m.kind, MsgKind::kDelta);
  EXPECT_EQ(m.chunk, 9u);
  EXPECT_EQ(m.seq, 3u);
  a->Release();
  ASSERT_TRUE(b->Poll(&m));
  EXPECT_EQ(m.chunk, 7u);
  EXPECT_EQ(m.seq, 1u);
  EXPECT_EQ(std::vector<float>(m.payload, m.payload + m.length), p1);
  b->Release();
  ASSERT_TRUE(b->Poll(&m));
  EXPECT_EQ(m.chunk, 8u);
  EXPECT_EQ(std::vector<float>(m.payload, m.payload + m.length), p2);
  b->Release();
  EXPECT_FALSE(b->Poll(&m));
  EXPECT_EQ(a->counters().sent, 2u);
}

TEST(InprocTransportTest, PostSendReturnsFalseWhenFull) {
  auto [a, b] = InprocTransport::MakePair(8, 3);
  std::vector<float> p{1, 2};
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(a->PostSend(Msg(MsgKind::kPosition, 0, i + 1, p)));
  EXPECT_FALSE(a->PostSend(Msg(MsgKind::kPosition, 0, 4, p)));  // no blocking, no room
  EXPECT_EQ(a->AcquireSend(), nullptr);
  Message m;
  ASSERT_TRUE(b->Poll(&m));
  EXPECT_EQ(a->AcquireSend(), nullptr);  // still held by the receiver until Release
  b->Release();
  float* s = a->AcquireSend();
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(a->AcquireSend(), s);  // acquiring again before commit gives the same slot
  s[0] = 42;
  a->CommitSend(MsgKind::kPosition, 5, 9, 1);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(b->Poll(&m));
    b->Release();
  }
  EXPECT_EQ(m.seq, 9u);
  EXPECT_EQ(m.payload[0], 42.f);
}

TEST(InprocTransportTest, FaultCountersMatchWhatArrived) {
  const uint64_t kSent = 5000;
  std::set<uint64_t> dropped_seqs;
  FaultOptions f;
  f.drop = f.duplicate = f.reorder = 0.2;
  f.seed = TestSeed();
  SCOPED_TRACE(testing::Message() << "seed " << f.seed);
  f.on_drop = [&](const Message& m) {
    EXPECT_EQ(m.payload[0], static_cast<float>(m.seq));
    dropped_seqs.insert(m.seq);
  };
  auto [a, b] = InprocTransport::MakePair(4, 8, f);
  std::vector<uint64_t> order;  // seqs in arrival order
  Message m;
  auto drain = [&] {
    while (b->Poll(&m)) {
      EXPECT_EQ(m.payload[0], static_cast<float>(m.seq));
      order.push_back(m.seq);
      b->Release();
    }
  };
  for (uint64_t s = 0; s < kSent; ++s) {
    std::vector<float> p{static_cast<float>(s)};
    ASSERT_TRUE(a->PostSend(Msg(MsgKind::kDelta, 0, s, p)));
    drain();
  }
  a->set_faults_enabled(false);
  std::vector<float> last{static_cast<float>(kSent)};
  ASSERT_TRUE(a->PostSend(Msg(MsgKind::kDelta, 0, kSent, last)));  // releases a held message
  drain();

  std::map<uint64_t, int> copies;
  std::set<uint64_t> late;  // seqs that arrived after a higher one
  uint64_t highest = 0;
  for (uint64_t s : order) {
    ++copies[s];
    if (s < highest) late.insert(s);
    highest = std::max(highest, s);
  }
  const TransportCounters c = a->counters();
  EXPECT_EQ(c.sent, kSent + 1);
  EXPECT_EQ(c.dropped, dropped_seqs.size());
  EXPECT_EQ(c.dropped + copies.size(), kSent + 1);  // every message either dropped or arrived
  for (uint64_t s : dropped_seqs) EXPECT_EQ(copies.count(s), 0u) << s;
  EXPECT_EQ(c.duplicated, order.size() - copies.size());
  EXPECT_EQ(c.reordered, late.size());
  EXPECT_GT(c.dropped, kSent / 10);
  EXPECT_GT(c.duplicated, kSent / 20);
  EXPECT_GT(c.reordered, kSent / 20);
}

TEST(InprocTransportTest, TwoThreadsNoLossInOrder) {
  const uint64_t kCount = 200000;
  auto [a, b] = InprocTransport::MakePair(3, 4);
  std::thread producer([&, a = a.get()] {
    for (uint64_t s = 1; s <= kCount;) {
      float* slot = a->AcquireSend();
      if (!slot) {
        std::this_thread::yield();
        continue;
      }
      slot[0] = static_cast<float>(s % 1000);
      slot[1] = 1;
      slot[2] = -static_cast<float>(s % 1000);
      a->CommitSend(MsgKind::kPosition, static_cast<uint32_t>(s % 17), s, 3);
      ++s;
    }
  });
  uint64_t expect = 1, bad = 0;
  Message m;
  while (expect <= kCount) {
    if (!b->Poll(&m)) {
      std::this_thread::yield();
      continue;
    }
    bad += m.seq != expect || m.chunk != expect % 17 || m.length != 3 ||
           m.payload[0] != static_cast<float>(expect % 1000) || m.payload[2] != -m.payload[0];
    b->Release();
    ++expect;
  }
  producer.join();
  EXPECT_EQ(bad, 0u);
}


// An over-long message is refused before anything is copied into the slot (the copy used to
// come first: a heap overflow under ASan), and nothing goes out.
TEST(InprocTransportTest, OverlongPostSendIsRefusedBeforeCopying) {
  auto [a, b] = InprocTransport::MakePair(16, 2);
  std::vector<float> big(4096, 7.f);
  EXPECT_THROW(a->PostSend(Msg(MsgKind::kPosition, 0, 1, big)), Bug);
  Message m;
  EXPECT_FALSE(b->Poll(&m));
  std::vector<float> ok(16, 1.f);
  ASSERT_TRUE(a->PostSend(Msg(MsgKind::kPosition, 0, 2, ok)));
  ASSERT_TRUE(b->Poll(&m));
  EXPECT_EQ(m.seq, 2u);
  EXPECT_EQ(std::vector<float>(m.payload, m.payload + m.length), ok);
  b->Release();
}

// With one slot, a message held back for reordering has no "next message" to wait for: it must
// go out when the sender next asks for a slot, or the link is wedged for good.
TEST(InprocTransportTest, OneSlotReorderingNeverWedges) {
  FaultOptions f;
  f.reorder = 1.0;
  auto [a, b] = InprocTransport::MakePair(8, 1, f);
  std::vector<float> p{1, 2, 3};
  int received = 0;
  Message m;
  for (uint64_t seq = 1; seq <= 20; ++seq) {
    bool sent = false;
    for (int tries = 0; tries < 100 && !sent; ++tries) {
      sent = a->PostSend(Msg(MsgKind::kPosition, 0, seq, p));
      while (b->Poll(&m)) {
        ++received;
        b->Release();
      }
    }
    ASSERT_TRUE(sent) << "the link wedged at message " << seq;
  }
  a->AcquireSend();  // lets the last held-back message go
  while (b->Poll(&m)) {
    ++received;
    b->Release();
  }
  EXPECT_EQ(received, 20);
}

}  // namespace
}  // namespace hogstream
