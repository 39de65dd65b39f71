// Tests of transport/fault: the injected faults' counters match exactly what the receiver saw;
// faults apply only to the kinds asked for; a delayed message arrives after its delay; a
// message held back with one slot never wedges the link. Over the inproc backend (the typed
// tests over every backend run the segment ledger through this decorator too).
#include "transport/fault/endpoint.hpp"

#include "base/common.hpp"
#include "transport/inproc/device.hpp"

#include "test/test_seed.hpp"
#include "test/transport/transport_test_util.hpp"
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <thread>
#include <vector>

namespace hogstream {
namespace HS_UNITY_ID {

Header Hdr(MsgKind kind, uint64_t seq) {
  Header h;
  h.kind = kind;
  h.seq = seq;
  h.length = sizeof(float);
  return h;
}

// The sync message a packet holds (the tests send sync's messages: transport_test_util.hpp).
Message M(const Packet& p) { return MessageOf(p); }

std::pair<std::unique_ptr<FaultEndpoint>, std::unique_ptr<Transport>> Faulty(uint32_t slots, FaultOptions f) {
  InprocOptions o;
  o.max_payload = kWireHeaderBytes + 16;
  o.slots = slots;
  auto [a, b] = InprocDevice::MakePair(o);
  return {std::make_unique<FaultEndpoint>(std::move(a), std::move(f)), std::move(b)};
}

TEST(FaultTransportTest, CountersMatchWhatArrived) {
  const uint64_t kSent = 5000;
  std::set<uint64_t> dropped_seqs;
  FaultOptions f;
  f.drop = f.duplicate = f.reorder = 0.2;
  f.seed = TestSeed();
  SCOPED_TRACE(testing::Message() << "seed " << f.seed);
  f.on_drop = [&](const Packet& p) {
    EXPECT_EQ(M(p).floats()[0], static_cast<float>(M(p).h.seq));
    dropped_seqs.insert(M(p).h.seq);
  };
  auto [a, b] = Faulty(8, f);
  std::vector<uint64_t> order;  // seqs in arrival order
  Packet m[8];
  auto drain = [&, b = b.get()] {
    for (size_t n; (n = b->Poll(m, 8)) > 0;) {
      for (size_t i = 0; i < n; ++i) {
        EXPECT_EQ(M(m[i]).floats()[0], static_cast<float>(M(m[i]).h.seq));
        order.push_back(M(m[i]).h.seq);
      }
      b->Release(n);
    }
  };
  for (uint64_t s = 0; s < kSent; ++s) {
    const float p = static_cast<float>(s);
    ASSERT_TRUE(test::Post(*a, Dest::Peer(1), Hdr(MsgKind::kDelta, s), &p));
    a->Flush();
    drain();
  }
  a->set_enabled(false);  // lets every held message go
  a->Flush();
  drain();
  EXPECT_EQ(a->held(), 0u);

  std::map<uint64_t, int> copies;
  std::set<uint64_t> late;  // seqs that arrived after a higher one
  uint64_t highest = 0;
  for (uint64_t s : order) {
    ++copies[s];
    if (s < highest) late.insert(s);
    highest = std::max(highest, s);
  }
  const TransportCounters c = a->counters();
  EXPECT_EQ(c.sent, kSent);
  EXPECT_EQ(c.dropped, dropped_seqs.size());
  EXPECT_EQ(c.dropped + copies.size(), kSent);  // every message either dropped or arrived
  for (uint64_t s : dropped_seqs) EXPECT_EQ(copies.count(s), 0u) << s;
  EXPECT_EQ(c.duplicated, order.size() - copies.size());
  EXPECT_EQ(c.reordered, late.size());
  EXPECT_GT(c.dropped, kSent / 10);
  EXPECT_GT(c.duplicated, kSent / 20);
  EXPECT_GT(c.reordered, kSent / 20);
  // Per peer: the caller's sends and the drops are peer 1's; what arrived is counted by b, per
  // its sender (peer 0), copies included.
  const std::vector<PeerCounters> mine = a->peer_counters(), theirs = b->peer_counters();
  ASSERT_EQ(mine.size(), 1u);
  EXPECT_EQ(mine[0].peer, 1);
  EXPECT_EQ(mine[0].sent, kSent);
  EXPECT_EQ(mine[0].bytes_sent, c.bytes_sent);
  EXPECT_EQ(mine[0].dropped, dropped_seqs.size());
  ASSERT_EQ(theirs.size(), 1u);
  EXPECT_EQ(theirs[0].peer, 0);
  EXPECT_EQ(theirs[0].received, order.size());
  EXPECT_EQ(theirs[0].rejected_total(), 0u);
}

TEST(FaultTransportTest, OnlyTheChosenKindsSufferFaults) {
  FaultOptions f;
  f.drop = 1.0;
  f.applies = FaultsOn(KindBit(MsgKind::kDelta));
  auto [a, b] = Faulty(4, f);
  const float p = 1;
  ASSERT_TRUE(test::Post(*a, Dest::Peer(1), Hdr(MsgKind::kDelta, 1), &p));
  ASSERT_TRUE(test::Post(*a, Dest::Peer(1), Hdr(MsgKind::kPosition, 2), &p));
  ASSERT_TRUE(test::Post(*a, Dest::Peer(1), Hdr(MsgKind::kIteration, 3), &p));
  Packet m[4];
  ASSERT_EQ(b->Poll(m, 4), 2u);
  EXPECT_EQ(M(m[0]).h.seq, 2u);
  EXPECT_EQ(M(m[1]).h.seq, 3u);
  EXPECT_EQ(a->counters().dropped, 1u);
  b->Release(2);
}

TEST(FaultTransportTest, DelayedMessageArrivesAfterItsDelay) {
  FaultOptions f;
  f.delay = 1.0;
  f.delay_us = 20000;
  auto [a, b] = Faulty(4, f);
  const float p = 1;
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(test::Post(*a, Dest::Peer(1), Hdr(MsgKind::kPosition, 1), &p));
  a->Flush();
  Packet m;
  EXPECT_EQ(b->Poll(&m, 1), 0u);
  const auto deadline = t0 + std::chrono::seconds(5);
  while (b->Poll(&m, 1) == 0 && std::chrono::steady_clock::now() < deadline) {
    a->Flush();  // the sender's calls let due messages go
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(M(m).h.seq, 1u) << "the delayed message never arrived (5 s deadline)";
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(20));
  EXPECT_EQ(a->counters().delayed, 1u);
  b->Release(1);
}

// With one slot, a message held back for reordering has no "next message" that can overtake it
// until the slot comes back: it must still go at a later sender call, or the link is wedged.
TEST(FaultTransportTest, OneSlotReorderingNeverWedges) {
  FaultOptions f;
  f.reorder = 1.0;
  auto [a, b] = Faulty(1, f);
  const float p = 1;
  int received = 0;
  Packet m;
  for (uint64_t seq = 1; seq <= 20; ++seq) {
    bool sent = false;
    for (int tries = 0; tries < 100 && !sent; ++tries) {
      sent = test::Post(*a, Dest::Peer(1), Hdr(MsgKind::kPosition, seq), &p);
      a->Flush();
      while (b->Poll(&m, 1)) {
        ++received;
        b->Release(1);
      }
    }
    ASSERT_TRUE(sent) << "the link wedged at message " << seq;
  }
  a->set_enabled(false);  // every held-back message is due now; each goes once the slot is back
  for (int calls = 0; calls < 100 && received < 20; ++calls) {
    a->Flush();
    while (b->Poll(&m, 1)) {
      ++received;
      b->Release(1);
    }
  }
  EXPECT_EQ(received, 20);
  EXPECT_EQ(a->held(), 0u);
}

}  // namespace
}  // namespace hogstream
