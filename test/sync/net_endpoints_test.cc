// A machine's endpoints in a job (sync/net_endpoints.hpp), two machines over an in-process
// pair: a delta answering a position that a re-share's retired master posted is still applied
// (by epoch), the retired master's figures stay in the sums after its grace, and a fresh round
// ends only once every chunk another machine masters has been answered since the last.
#include "sync/net_endpoints.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <string>
#include <vector>

#include "sync/net_recovery.hpp"
#include "sync/net_start.hpp"
#include "sync/wire.hpp"
#include "test/test_seed.hpp"
#include "transport/inproc/device.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
constexpr size_t kFloats = 4000;
constexpr uint32_t kChunk = 256;  // 16 chunks
constexpr uint32_t kDeadMs = 600;

// Machine `rank` of two: its weights (the same start on both), endpoints and shares.
struct Side {
  Side(int rank, std::unique_ptr<Transport> t, const std::vector<float>& w0, uint32_t window)
      : transport(std::move(t)), wire(transport.get()), w(w0), shares(rank, 2, false, 1000),
        endpoints(transport.get(), NetEndpointOptions{false, window, 0, 0, kDeadMs}) {
    const ChunkLayout layout(kFloats, kChunk);
    shares.set_chunks(layout.count);
    endpoints.Open(w.data(), layout, SegmentRule{}, nullptr);
  }
  // Machine 0 masters every chunk, machine 1 none.
  void ShareAllToZero(int rank) {
    const std::vector<uint32_t> before = shares.owned();
    const NetShares::Change ch = shares.Reshare({0}, {true, true});
    endpoints.Reshare(shares, ch, before, static_cast<PeerId>(rank), 2, Clock::now());
  }
  // Handles what came in (answers positions, applies deltas); returns how many messages.
  size_t Drain() {
    size_t n = 0;
    for (const Message* m; (m = inbox.Next(wire)) != nullptr; ++n) {
      if (!TakeData(*m, endpoints.slave(), m->h.kind == MsgKind::kDelta ? endpoints.MasterFor(*m) : nullptr, wire)) break;
      inbox.Handled();
    }
    wire.Flush();
    return n;
  }
  std::unique_ptr<Transport> transport;
  Wire wire;
  std::vector<float> w;
  NetShares shares;
  NetEndpoints endpoints;
  Inbox inbox;
};

struct Pair {
  explicit Pair(uint32_t window = 64) {
    std::mt19937 gen(TestSeed());
    std::uniform_real_distribution<float> u(-1, 1);
    std::vector<float> w0(kFloats);
    for (float& x : w0) x = u(gen);
    InprocOptions o;
    o.max_payload = kWireHeaderBytes + kChunk * sizeof(float);
    o.slots = 64;
    auto [a, b] = InprocDevice::MakePair(o);
    zero = std::make_unique<Side>(0, std::move(a), w0, window);
    one = std::make_unique<Side>(1, std::move(b), w0, window);
    zero->ShareAllToZero(0);
    one->ShareAllToZero(1);
    start = w0;
  }
  std::unique_ptr<Side> zero, one;
  std::vector<float> start;
};

TEST(NetEndpointsTest, ADeltaToARetiredMastersPositionIsAppliedAndItsFiguresOutliveIt) {
  Pair p;
  const uint32_t chunks = p.zero->endpoints.layout().count;
  ASSERT_EQ(p.zero->shares.owned().size(), chunks);
  ASSERT_EQ(p.zero->endpoints.destinations(), 1u);
  // Machine 1's solver steps: +0.5 everywhere.
  for (float& x : p.one->w) x += 0.5f;
  const Clock::time_point t0 = Clock::now();
  p.zero->endpoints.Post(chunks, 1, 1, t0);
  ASSERT_EQ(p.one->Drain(), chunks) << "every position came to machine 1 and was answered";
  // The masters are made anew (a new epoch) before the deltas come in.
  NetShares::Change ch;
  ch.masters = true;
  ch.make = {{Dest::Peer(1), p.zero->shares.epoch() + 1}};
  p.zero->endpoints.Reshare(p.zero->shares, ch, p.zero->shares.owned(), 0, 2, t0);
  ASSERT_EQ(p.zero->Drain(), chunks);
  for (size_t i = 0; i < kFloats; ++i)
    ASSERT_NEAR(p.zero->w[i], p.start[i] + 0.5f, 1e-5) << "element " << i << ": the delta was lost";
  // Machine 0's figures: every delta applied (by machine 1), every position it sent.
  auto expect_all_counted = [&](const char* when) {
    NetworkFigures f;
    f.peers.resize(2);
    f.peers[1].rank = 1;
    p.zero->endpoints.Figures(&f, 2, p.zero->shares);
    EXPECT_EQ(f.deltas_applied, chunks) << when;
    EXPECT_EQ(f.peers[1].deltas_applied, chunks) << when;
    EXPECT_EQ(f.positions_sent, chunks) << when;
  };
  expect_all_counted("while the retired master takes answers");
  // Past the grace the retired master goes; what it did stays in the sums.
  p.zero->endpoints.Post(0, 2, 2, t0 + RetiredMasterGrace(kDeadMs) + milliseconds(1));
  expect_all_counted("after it went");
}

TEST(NetEndpointsTest, AFreshRoundEndsOnlyOnceEveryChunkIsAnsweredAgain) {
  Pair p(/*window=*/4);  // four positions in flight at most
  const uint32_t chunks = p.one->endpoints.layout().count;
  FreshRounds rounds;
  EXPECT_FALSE(rounds.Step(p.one->endpoints, p.one->shares, 10)) << "the first call marks where a round begins";
  Clock::time_point t = Clock::now();
  size_t answered = 0;
  int steps = 0;
  while (answered < chunks) {
    t += milliseconds(1);
    p.zero->endpoints.Post(chunks, 1, 1, t);
    answered += p.one->Drain();
    p.zero->Drain();
    const bool round = rounds.Step(p.one->endpoints, p.one->shares, 20 + steps++);
    EXPECT_EQ(round, answered >= chunks) << answered << " of " << chunks << " answered";
    ASSERT_LT(steps, 1000);
  }
  EXPECT_GT(steps, 1) << "the window spread the round over several passes";
  EXPECT_EQ(rounds.rounds(), 1u);
  EXPECT_EQ(rounds.flushed_iter(), 10) << "the iterations run when the round began have gone out";
}

// The joining phase (NetStart::Join) over machine 1's slave, machine 0 mastering every chunk: a
// newcomer joins once every chunk has come, and fails with one line when start_ms pass short of
// them; a recovery fails once no other machine has had the weights for dead_ms, and waits while
// none is in sight, even with every chunk in (it must take them from a sound copy, not its own).
TEST(NetEndpointsTest, JoiningEndsOnceEveryChunkCameFromAnotherMachine) {
  constexpr uint32_t kStartMs = 1000;
  Pair p;
  const uint32_t chunks = p.zero->endpoints.layout().count;
  const SlaveEndpoint& slave = p.one->endpoints.slave();
  const Clock::time_point t0 = Clock::now();
  {
    NetStart start(kStartMs, 20);
    NetRecovery recovery;
    EXPECT_EQ(start.Join(t0 + milliseconds(kStartMs), t0, slave, true, recovery, kDeadMs), NetStart::Joining::kWait)
        << "nothing heard yet, within start_ms";
    EXPECT_EQ(start.Join(t0 + milliseconds(kStartMs + 1), t0, slave, true, recovery, kDeadMs),
              NetStart::Joining::kFailed);
    EXPECT_NE(start.error().find("only 0 of " + std::to_string(chunks) + " chunks received after 1 s"), std::string::npos)
        << start.error();
    EXPECT_FALSE(recovery.failed());
  }
  {
    NetStart start(kStartMs, 20);
    NetRecovery recovery;
    recovery.Begin(t0);
    // No owner: waits dead_ms, then the job cannot go on (a start_ms long past is not asked).
    EXPECT_EQ(start.Join(t0 + milliseconds(kDeadMs), t0 - milliseconds(10 * kStartMs), slave, false, recovery, kDeadMs),
              NetStart::Joining::kWait);
    EXPECT_EQ(start.Join(t0 + milliseconds(kDeadMs + 1), t0, slave, false, recovery, kDeadMs), NetStart::Joining::kFailed);
    EXPECT_TRUE(recovery.failed());
    EXPECT_NE(recovery.error().find("none is left to recover from"), std::string::npos) << recovery.error();
    EXPECT_FALSE(start.failed()) << "a failed recovery is the recovery's line, not the start's";
  }
  // Every chunk comes to machine 1.
  p.zero->endpoints.Post(chunks, 1, 1, t0);
  ASSERT_EQ(p.one->Drain(), chunks);
  ASSERT_EQ(slave.chunks_heard(), chunks);
  NetStart start(kStartMs, 20);
  NetRecovery recovery;
  EXPECT_EQ(start.Join(t0, t0, slave, false, recovery, kDeadMs), NetStart::Joining::kJoined) << "a newcomer";
  recovery.Begin(t0);
  EXPECT_EQ(start.Join(t0, t0, slave, false, recovery, kDeadMs), NetStart::Joining::kWait)
      << "a recovery with no owner in sight has only its own chunks";
  EXPECT_EQ(start.Join(t0 + milliseconds(kDeadMs / 2), t0, slave, true, recovery, kDeadMs), NetStart::Joining::kJoined);
  // An owner seen keeps a recovery short of chunks from failing until dead_ms after.
  Pair q;
  NetRecovery later;
  later.Begin(t0);
  const SlaveEndpoint& empty = q.one->endpoints.slave();
  EXPECT_EQ(start.Join(t0 + milliseconds(kDeadMs), t0, empty, true, later, kDeadMs), NetStart::Joining::kWait);
  EXPECT_EQ(start.Join(t0 + milliseconds(2 * kDeadMs), t0, empty, false, later, kDeadMs), NetStart::Joining::kWait);
  EXPECT_EQ(start.Join(t0 + milliseconds(2 * kDeadMs + 1), t0, empty, false, later, kDeadMs), NetStart::Joining::kFailed);
}

}  // namespace
}  // namespace hogstream
