// The control channel of a job across machines (sync/net_control.hpp), between two channels in
// one test with no transport: what one encodes the other decodes unchanged (random values), and
// every refusal is counted by its reason: malformed, unproven (no echo of the receiver's
// nonce), replayed, of a replaced run, disagreeing, "done" from a machine that does not lead.
#include "sync/net_control.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "test/test_seed.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

// One control message from `from` to `to` as a received message (the transport sets source).
struct Wire {
  Header h;
  NetControl body;
  Message Received(PeerId from) const {
    Message m;
    m.h = h;
    m.h.source = from;
    m.payload = reinterpret_cast<const std::byte*>(&body);
    return m;
  }
};

Wire Send(NetControlChannel& from, int to, const ControlState& s) {
  auto [h, b] = from.Round(s);
  from.EchoTo(to, &b);
  return {h, b};
}

ControlState State(uint32_t flags) {
  ControlState s;
  s.flags = flags;
  s.first_epoch = 1700000000;
  return s;
}

// Channel `from` (rank `fr`) proves its run at channel `at` (rank `ar`): its hello, refused as
// unproven, is echoed back in `at`'s next message, which `from` then believes (where they
// agree). Returns what `at` made of the hello.
ControlNews Prove(NetControlChannel& at, int ar, NetControlChannel& from, int fr) {
  const ControlNews hello = at.Decode(Send(from, ar, State(0)).Received(static_cast<PeerId>(fr)), false);
  EXPECT_EQ(hello.refused, ControlRefusal::kUnproven);
  from.Decode(Send(at, fr, State(0)).Received(static_cast<PeerId>(ar)), false);
  return hello;
}

TEST(NetControlTest, WhatOneMachineEncodesTheOtherDecodesUnchanged) {
  std::mt19937_64 rng(TestSeed());
  NetControlChannel zero(0, 2, FreshNonce()), one(1, 2, FreshNonce());
  EXPECT_TRUE(Prove(one, 1, zero, 0).answer_now) << "a new run's hello is answered at once";
  for (int i = 0; i < 1000; ++i) {
    ControlState s;
    s.flags = static_cast<uint32_t>(rng() & 127);
    s.first_epoch = static_cast<uint32_t>(rng());
    s.clock = static_cast<int64_t>(rng() >> 1);
    s.view = static_cast<int64_t>(rng() >> 1);
    s.flushed = static_cast<int64_t>(rng());
    s.snapshots = static_cast<int64_t>(rng());
    s.solvers = static_cast<int>(1 + rng() % 256);
    s.held = rng();
    const ControlNews news = one.Decode(Send(zero, 1, s).Received(0), true);
    ASSERT_TRUE(news.taken) << "message " << i << " refused: " << ControlRefusalName(news.refused);
    EXPECT_EQ(news.told.flags, s.flags);
    EXPECT_EQ(news.told.first_epoch, s.first_epoch);
    EXPECT_EQ(news.told.clock, s.clock);
    EXPECT_EQ(news.told.view, s.view);
    EXPECT_EQ(news.told.flushed, s.flushed);
    EXPECT_EQ(news.told.snapshots, s.snapshots);
    EXPECT_EQ(news.told.solvers, s.solvers);
    EXPECT_EQ(news.told.held, s.held);
    EXPECT_EQ(news.new_run, i == 0) << "machine 0's run is taken with its first message believed";
    EXPECT_FALSE(news.restarted);
  }
  // A clock beyond int64_t (a forged header) is read as the largest one.
  Wire w = Send(zero, 1, State(0));
  w.h.clock = w.h.seq = std::numeric_limits<uint64_t>::max();
  const ControlNews news = one.Decode(w.Received(0), true);
  EXPECT_EQ(news.told.clock, std::numeric_limits<int64_t>::max());
  EXPECT_EQ(news.told.view, std::numeric_limits<int64_t>::max());
  for (size_t r = 0; r < static_cast<size_t>(ControlRefusal::kCount); ++r)
    EXPECT_EQ(one.refusals()[r], r == static_cast<size_t>(ControlRefusal::kUnproven) ? 1u : 0u)
        << ControlRefusalName(static_cast<ControlRefusal>(r)) << " (the one unproven: Prove's hello)";
}

TEST(NetControlTest, AMismatchingAgreementHashIsRefusedCountedAndNamedOnce) {
  NetControlChannel zero(0, 2, FreshNonce()), one(1, 2, FreshNonce());
  uint64_t a0[kAgreeKinds] = {11, 22, 0, 44}, a1[kAgreeKinds] = {11, 23, 33, 44};
  zero.set_agreement(a0);
  one.set_agreement(a1);
  Prove(one, 1, zero, 0);  // the hello is refused as unproven before agreement is looked at
  ControlNews news = one.Decode(Send(zero, 1, State(kNetReady)).Received(0), false);
  EXPECT_FALSE(news.taken);
  EXPECT_EQ(news.refused, ControlRefusal::kDisagree);
  EXPECT_EQ(news.disagree, kAgreeNet);
  EXPECT_TRUE(news.first_disagree);
  news = one.Decode(Send(zero, 1, State(kNetReady)).Received(0), false);
  EXPECT_EQ(news.refused, ControlRefusal::kDisagree);
  EXPECT_FALSE(news.first_disagree) << "named once";
  EXPECT_EQ(one.refused(ControlRefusal::kDisagree), 2u);
  // A hash one side does not check (0: kAgreeSolver here) never disagrees.
  a1[kAgreeNet] = 22;
  one.set_agreement(a1);
  EXPECT_TRUE(one.Decode(Send(zero, 1, State(kNetReady)).Received(0), false).taken);
  EXPECT_EQ(DisagreementLine("machine 0", "machine 1", kAgreeNet),
            "machine 0 differs from machine 1 in its net (its parameter shapes): every machine of a job needs the same");
}

TEST(NetControlTest, DoneFromAMachineThatDoesNotLeadIsStruckAndCounted) {
  NetControlChannel zero(0, 2, FreshNonce()), one(1, 2, FreshNonce());
  Prove(one, 1, zero, 0);
  ControlNews news = one.Decode(Send(zero, 1, State(kNetReady | kNetDone | kNetKeep | kNetStop)).Received(0), false);
  EXPECT_TRUE(news.taken) << "the rest of it is taken";
  EXPECT_TRUE(news.not_leader);
  EXPECT_EQ(news.told.flags, kNetReady | kNetStop);
  EXPECT_EQ(one.refused(ControlRefusal::kNotLeader), 1u);
  news = one.Decode(Send(zero, 1, State(kNetDone | kNetKeep)).Received(0), true);  // from the leader
  EXPECT_EQ(news.told.flags, kNetDone | kNetKeep);
  EXPECT_EQ(one.refused(ControlRefusal::kNotLeader), 1u);
}

TEST(NetControlTest, MalformedUnprovenReplayedAndReplacedRunsAreRefusedByReason) {
  NetControlChannel zero(0, 2, FreshNonce()), one(1, 2, FreshNonce());
  // Malformed: a short payload, a zero nonce, a source outside the job or this machine itself.
  Wire w = Send(zero, 1, State(0));
  w.h.length -= 8;
  EXPECT_EQ(one.Decode(w.Received(0), false).refused, ControlRefusal::kMalformed);
  w = Send(zero, 1, State(0));
  w.body.nonce = 0;
  EXPECT_EQ(one.Decode(w.Received(0), false).refused, ControlRefusal::kMalformed);
  EXPECT_EQ(one.Decode(Send(zero, 1, State(0)).Received(2), false).refused, ControlRefusal::kMalformed);
  EXPECT_EQ(one.Decode(Send(zero, 1, State(0)).Received(1), false).refused, ControlRefusal::kMalformed);
  EXPECT_EQ(one.refused(ControlRefusal::kMalformed), 4u);
  // Unproven: machine 0 has not seen machine 1's nonce, so it echoes nothing of it.
  const Wire early = Send(zero, 1, State(kNetStop));
  EXPECT_EQ(one.Decode(early.Received(0), false).refused, ControlRefusal::kUnproven);
  EXPECT_FALSE(Prove(one, 1, zero, 0).answer_now) << "its hello is echoed already";
  const Wire first = Send(zero, 1, State(kNetReady));
  const ControlNews taken = one.Decode(first.Received(0), false);
  EXPECT_TRUE(taken.taken);
  EXPECT_TRUE(taken.new_run);
  EXPECT_FALSE(taken.restarted) << "first contact";
  // Replayed: the same counter again, or an earlier one.
  EXPECT_EQ(one.Decode(first.Received(0), false).refused, ControlRefusal::kReplay);
  EXPECT_EQ(one.refused(ControlRefusal::kReplay), 1u);
  // Machine 0 restarts: its new run is a hello until proven, then a restart; its old run's
  // messages are refused from then on, even those never seen.
  NetControlChannel again(0, 2, FreshNonce());
  const Wire old = Send(zero, 1, State(kNetReady));
  EXPECT_EQ(one.Decode(Send(again, 1, State(0)).Received(0), false).refused, ControlRefusal::kUnproven);
  ASSERT_TRUE(again.Decode(Send(one, 0, State(0)).Received(1), false).taken) << "machine 1 echoes the new run";
  const ControlNews restart = one.Decode(Send(again, 1, State(kNetReady)).Received(0), false);
  EXPECT_TRUE(restart.taken);
  EXPECT_TRUE(restart.new_run);
  EXPECT_TRUE(restart.restarted);
  EXPECT_TRUE(restart.answer_now);
  EXPECT_EQ(one.Decode(old.Received(0), false).refused, ControlRefusal::kOldRun);
  EXPECT_EQ(one.refused(ControlRefusal::kOldRun), 1u);
  EXPECT_EQ(one.refused(ControlRefusal::kUnproven), 3u);  // early, Prove's hello, the new run's hello
}

TEST(NetControlTest, AClockIsBoundedByWhatItsMachineCouldHaveRun) {
  bool clamped = true;
  EXPECT_EQ(BoundClock(100, 50, 1, 0, &clamped), 100) << "never back";
  EXPECT_FALSE(clamped);
  EXPECT_EQ(BoundClock(100, 164, 0, 0, &clamped), 164);
  EXPECT_FALSE(clamped);
  EXPECT_EQ(BoundClock(100, 1125, 0, 0, &clamped), 164) << "64 at once, no more";
  EXPECT_TRUE(clamped);
  EXPECT_EQ(BoundClock(0, int64_t{1} << 40, 2, 0, &clamped), 64 + 4 * 1000 * 2) << "1 000 it/s while no rate is known";
  EXPECT_EQ(BoundClock(0, int64_t{1} << 40, 2, 5000, &clamped), 64 + 4 * 5000 * 2);
  // The case: a machine known at 20 it/s, heard 0.1 s ago, claims 1e9: 72, not 1 220.
  EXPECT_EQ(BoundClock(402, 1000000000, 0.1, 20, &clamped), 402 + 64 + 8);
  EXPECT_TRUE(clamped);
  EXPECT_EQ(BoundClock(402, 402 + 64 + 8, 0.1, 20, &clamped), 402 + 64 + 8) << "an honest clock at 4x its rate";
  EXPECT_FALSE(clamped);
  EXPECT_EQ(BoundClock(0, std::numeric_limits<int64_t>::max(), 1e30, 1e30, &clamped), 64 + int64_t{1000000000000000});
}

}  // namespace
}  // namespace hogstream

namespace hogstream {
namespace HS_UNITY_ID {

// When a round is due: a heartbeat after the last one sent; an answer asked for (a hello to
// echo) 2 ms after it, not sooner (forged hellos must not make a machine send one message each).
TEST(NetControlTest, ARoundIsDueEveryHeartbeatAndAnAnswerAfterTwoMilliseconds) {
  using std::chrono::milliseconds;
  NetControlChannel c(0, 2, 7);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(c.Due(t0, 20)) << "never sent: due";
  c.Sent(t0);
  EXPECT_FALSE(c.Due(t0 + milliseconds(19), 20));
  EXPECT_TRUE(c.Due(t0 + milliseconds(20), 20));
  c.Sent(t0 + milliseconds(20));
  c.AnswerSoon();
  EXPECT_FALSE(c.Due(t0 + milliseconds(21), 20)) << "within 2 ms of the last";
  EXPECT_TRUE(c.Due(t0 + milliseconds(22), 20));
  EXPECT_FALSE(c.Due(t0 + milliseconds(23), 20)) << "the answer taken: back to the heartbeat";
}

}  // namespace
}  // namespace hogstream
