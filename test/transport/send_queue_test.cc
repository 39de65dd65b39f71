// Tests of transport/send_queue (the send machinery udp/, raw/ and verbs/ share), on made-up
// times, so nothing here sleeps: the pacer holds a sender to its rate (plus one burst) and lets
// a frame go exactly when the rate has earned it; unpaced, it counts nothing; slots run out,
// come back when sent, dropped or freed after flight, and a slot acquired twice is the same
// one; the queue keeps commit order; the heartbeat interval fires at its deadline, not before,
// and once; the peer timeout and route lookup; slot memory is aligned (and zeroed when asked).
#include "transport/send_queue.hpp"

#include "base/common.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace hogstream {
namespace HS_UNITY_ID {

using std::chrono::microseconds;
using std::chrono::milliseconds;
using std::chrono::seconds;

const SteadyTime kT0 = SteadyTime{} + seconds(1000);  // an arbitrary "now"

struct Entry {
  uint32_t slot;
  uint32_t bytes;
  int tag = 0;
};

// A sender idle for a second, then flushing every 100 us for a simulated second at 1 MB/s with
// 1500-byte frames, sends the rate's worth plus at most one burst (what the idle second left
// in the bucket), and no more.
TEST(TransportPacerTest, HoldsASenderToItsRate) {
  constexpr uint64_t kRate = 1'000'000;
  constexpr double kFrame = 1500, kBurst = 16 * kFrame;
  Pacer p(kRate, kBurst, kBurst, kT0);
  ASSERT_TRUE(p.paced());
  double sent = 0;
  for (SteadyTime t = kT0 + seconds(1); t <= kT0 + seconds(2); t += microseconds(100)) {
    p.Refill(t);
    double batch = 0;
    while (p.Fits(batch + kFrame)) batch += kFrame;
    p.Spend(batch);
    sent += batch;
  }
  EXPECT_LE(sent, kRate + kBurst);
  EXPECT_GE(sent, kRate + kBurst - 2 * kFrame);
}

// Idle time earns no more than the burst.
TEST(TransportPacerTest, ABucketHoldsAtMostItsBurst) {
  Pacer p(1'000'000, 3000, 0, kT0);
  EXPECT_FALSE(p.Fits(1));
  p.Refill(kT0 + seconds(10));
  EXPECT_DOUBLE_EQ(p.tokens(), 3000);
  EXPECT_TRUE(p.Fits(3000));
  EXPECT_FALSE(p.Fits(3001));
}

// A frame that does not fit waits until the rate has earned it: 100 bytes at 1000 B/s from an
// empty bucket go at 100 ms, not 1 ms earlier.
TEST(TransportPacerTest, AFrameWaitsUntilItsDeadline) {
  Pacer p(1000, 1000, 0, kT0);
  p.Refill(kT0 + milliseconds(99));
  EXPECT_FALSE(p.Fits(100)) << "went " << 100 - p.tokens() << " bytes early";
  p.Refill(kT0 + milliseconds(100));
  EXPECT_TRUE(p.Fits(100));
  p.Spend(100);
  EXPECT_FALSE(p.Fits(1)) << "the bytes sent were not counted";
}

TEST(TransportPacerTest, UnpacedLetsEverythingGoAndCountsNothing) {
  Pacer p;
  EXPECT_FALSE(p.paced());
  EXPECT_TRUE(p.Fits(1e12));
  p.Spend(1e9);
  p.Refill(kT0);
  EXPECT_EQ(p.tokens(), 0);
  EXPECT_TRUE(p.Fits(1e12));
}

// Three slots: three acquires and commits take them all (slot 0 first), a fourth answers
// none; a slot sent comes back and is the next one given out.
TEST(TransportSendQueueTest, SlotsRunOutAndComeBack) {
  SendQueue<Entry> q(3);
  for (uint32_t want = 0; want < 3; ++want) {
    const std::optional<uint32_t> s = q.Acquire();
    ASSERT_TRUE(s.has_value());
    EXPECT_EQ(*s, want);
    q.Commit({*s, 100});
  }
  EXPECT_TRUE(q.exhausted());
  EXPECT_FALSE(q.Acquire().has_value());
  EXPECT_FALSE(q.acquired());
  q.Sent(1);
  EXPECT_FALSE(q.exhausted());
  EXPECT_EQ(q.Acquire(), std::optional<uint32_t>(0u));
  EXPECT_TRUE(q.acquired());
}

// Acquiring again before a commit gives the same slot (abandoning a filled slot is free).
TEST(TransportSendQueueTest, AcquireAgainIsTheSameSlot) {
  SendQueue<Entry> q(4);
  const auto a = q.Acquire(), b = q.Acquire();
  ASSERT_TRUE(a && b);
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(q.acquired_slot(), *a);
  q.Commit({*a, 10});
  EXPECT_NE(*q.Acquire(), *a);
}

// Dropped frees slots without counting bytes; Posted keeps them taken until Free (verbs: until
// the completion).
TEST(TransportSendQueueTest, DroppedAndPostedSlots) {
  SendQueue<Entry> q(2, Pacer(1000, 1000, 500, kT0));
  for (int i = 0; i < 2; ++i) q.Commit({*q.Acquire(), 200});
  q.Dropped(1);
  EXPECT_EQ(q.pacer().tokens(), 500) << "a dropped frame was counted as sent";
  EXPECT_EQ(q.Acquire(), std::optional<uint32_t>(0u));
  q.Commit({0, 200});
  q.Posted(2);  // slots 1 and 0 in flight
  EXPECT_EQ(q.waiting(), 0u);
  EXPECT_FALSE(q.Acquire().has_value()) << "a slot in flight was given out";
  q.Free(1);
  EXPECT_EQ(q.Acquire(), std::optional<uint32_t>(1u));
}

// Sends leave in commit order whatever their slots, and Sent counts exactly their bytes.
TEST(TransportSendQueueTest, KeepsCommitOrder) {
  SendQueue<Entry> q(8, Pacer(1, 1e9, 1e6, kT0));
  std::vector<uint32_t> slots;
  for (int i = 0; i < 5; ++i) {
    slots.push_back(*q.Acquire());
    q.Commit({slots.back(), static_cast<uint32_t>(100 * (i + 1)), i});
  }
  q.Sent(2);  // slots 0 and 1 back on the stack, 1 on top
  for (int i = 5; i < 7; ++i) {
    slots.push_back(*q.Acquire());
    q.Commit({slots.back(), static_cast<uint32_t>(100 * (i + 1)), i});
  }
  EXPECT_EQ(slots[5], 1u);
  EXPECT_EQ(slots[6], 0u);
  ASSERT_EQ(q.waiting(), 5u);
  for (size_t i = 0; i < q.waiting(); ++i) {
    EXPECT_EQ(q.at(i).tag, static_cast<int>(i + 2));
    EXPECT_EQ(&q.oldest()[i], &q.at(i)) << "not contiguous";
  }
  EXPECT_EQ(q.pacer().tokens(), 1e6 - 300);
  q.Sent(5);
  EXPECT_EQ(q.waiting(), 0u);
  EXPECT_EQ(q.pacer().tokens(), 1e6 - 300 - (300 + 400 + 500 + 600 + 700));
}

TEST(TransportSendQueueTest, CommitWithoutAcquireIsABug) {
  SendQueue<Entry> q(2);
  EXPECT_THROW(q.acquired_slot(), Bug);
  EXPECT_THROW(q.Commit({0, 1}), Bug);
  q.Acquire();
  EXPECT_THROW(q.Commit({1, 1}), Bug) << "a slot not acquired was committed";
}

// The heartbeat interval: due at its deadline, not a nanosecond before, then once only; the
// next deadline runs from when it fired. A default start is due at once.
TEST(TransportIntervalTest, DueAtItsDeadlineAndOnce) {
  Interval beat(milliseconds(50), kT0);
  EXPECT_FALSE(beat.Due(kT0));
  EXPECT_FALSE(beat.Due(kT0 + milliseconds(50) - std::chrono::nanoseconds(1)));
  EXPECT_TRUE(beat.Due(kT0 + milliseconds(60)));
  EXPECT_FALSE(beat.Due(kT0 + milliseconds(60))) << "due twice";
  EXPECT_FALSE(beat.Due(kT0 + milliseconds(109)));
  EXPECT_TRUE(beat.Due(kT0 + milliseconds(110)));
  Interval first(milliseconds(50), SteadyTime{});
  EXPECT_TRUE(first.Due(kT0));
}

TEST(TransportLivenessTest, TimeoutAndHeard) {
  EXPECT_EQ(Liveness(50, 0).timeout(), milliseconds(500)) << "0: ten heartbeats";
  Liveness live(50, 120);
  EXPECT_EQ(live.timeout(), milliseconds(120));
  EXPECT_TRUE(live.heard().empty());
  live.Heard(3, kT0);
  live.Heard(3, kT0 + milliseconds(7));
  live.Heard(1, kT0);
  ASSERT_EQ(live.heard().size(), 2u);
  EXPECT_EQ(live.heard().at(3), kT0 + milliseconds(7));
}

TEST(TransportRouteTest, PeerGroupOrOneLineError) {
  const std::map<PeerId, int> peers{{1, 10}, {2, 20}};
  const std::map<uint16_t, int> groups{{1, 100}};
  EXPECT_EQ(RouteOf(peers, groups, Dest::Peer(2), "x: no address for"), 20);
  EXPECT_EQ(RouteOf(peers, groups, Dest::Group(1), "x: no address for"), 100);
  try {
    RouteOf(peers, groups, Dest::Group(7), "udp: no address for");
    ADD_FAILURE() << "no Error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "udp: no address for group 7");
  }
  try {
    RouteOf(peers, groups, Dest::Peer(3), "raw: no MAC for");
    ADD_FAILURE() << "no Error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "raw: no MAC for peer 3");
  }
}

TEST(TransportSlotMemoryTest, AlignedAndZeroedWhenAsked) {
  const SlotMemory a = AllocSlots(100, 64);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.get()) % 64, 0u);
  const SlotMemory z = AllocSlots(5000, 4096, /*zero=*/true);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(z.get()) % 4096, 0u);
  size_t nonzero = 0;
  for (size_t i = 0; i < 8192; ++i) nonzero += z[i] != std::byte{0};  // rounded up to 8192
  EXPECT_EQ(nonzero, 0u);
}

}  // namespace
}  // namespace hogstream
