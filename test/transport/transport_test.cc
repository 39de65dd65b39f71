// The conformance suite: every scheme in the transport registry (transport/registry.hpp),
// opened through the factory as a program opens it (test/transport/registered_ends.hpp: inproc
// and udp on 127.0.0.1 by their loopback urls, the test-only loop://, raw Ethernet over a veth
// pair between two network namespaces, root only, skipped with the reason otherwise, verbs over
// the in-process fake fabric where the build has verbs): messages arrive whole and once; a
// sender with every slot committed answers "no slot" instead of blocking; the segment's exact
// ledger (master == initial + increments - exactly the dropped deltas) holds through the fault
// decorator over the backend; a closed peer becomes "peer down" within a deadline. A backend
// registered tomorrow is in the suite without a line here. Every wait has a deadline: a stuck
// link fails, it does not hang.
#include "transport/transport.hpp"

#include "base/common.hpp"
#include "sync/segment.hpp"
#include "transport/fault/endpoint.hpp"
#include "transport/registry.hpp"

#include "test/test_seed.hpp"
#include "test/transport/registered_ends.hpp"
#include "test/transport/transport_test_util.hpp"
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <thread>
#include <vector>

namespace hogstream {
namespace HS_UNITY_ID {

using Clock = std::chrono::steady_clock;
using Link = std::pair<std::unique_ptr<Transport>, std::unique_ptr<Transport>>;

// The parameter: a registered scheme's name. Make links its ends 0 and 1 with messages of up to
// max_payload bytes (rounded up to 16), `slots` send and receive slots, heartbeats every 10 ms
// and a peer down after 200 ms of silence.
class TransportTest : public testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    scheme_ = FindTransport(GetParam());
    ASSERT_NE(scheme_, nullptr) << GetParam() << ":// is no longer registered";
    std::string why;
    test::RegisteredEnds(*scheme_, Options(64, 4), &why);  // (opened and closed: can this host?)
    if (!why.empty()) GTEST_SKIP() << GetParam() << "://: " << why;
  }
  static OpenOptions Options(uint32_t max_payload, uint32_t slots) {
    OpenOptions o;
    o.job = 0x5eed;
    o.max_payload = (max_payload + 15) / 16 * 16;
    o.send_slots = o.recv_slots = slots;
    o.heartbeat_ms = 10;
    o.peer_timeout_ms = 200;
    return o;
  }
  Link Make(uint32_t max_payload, uint32_t slots) {
    std::string why;
    std::vector<std::unique_ptr<Transport>> t = test::RegisteredEnds(*scheme_, Options(max_payload, slots), &why);
    HS_CHECK(why.empty() && t.size() == 2) << GetParam() << "://: " << t.size() << " ends; " << why;
    return {std::move(t[0]), std::move(t[1])};
  }

 private:
  const TransportScheme* scheme_ = nullptr;
};
INSTANTIATE_TEST_SUITE_P(Registered, TransportTest, testing::ValuesIn(test::RegisteredSchemes()),
                         [](const testing::TestParamInfo<std::string>& p) { return p.param; });

Header Hdr(MsgKind kind, uint32_t chunk, uint64_t seq, uint32_t bytes) {
  Header h;
  h.kind = kind;
  h.chunk = chunk;
  h.seq = seq;
  h.clock = seq * 3;
  h.epoch = 5;
  h.length = bytes;
  return h;
}

// Messages of random lengths (0 to max_payload) in batches, both ways; each arrives once, with
// its header and every payload byte.
TEST_P(TransportTest, MessagesArriveWhole) {
  const uint32_t seed = TestSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937 gen(seed);
  auto [a, b] = Make(4096, 16);
  const uint32_t kMax = std::min<uint32_t>(4096, a->caps().max_payload - kWireHeaderBytes);  // verbs: the MTU's
  for (auto [from, to] : {std::pair{a.get(), b.get()}, std::pair{b.get(), a.get()}}) {
    const PeerId dest = to->self();
    std::map<uint64_t, uint32_t> want;  // seq -> length
    uint64_t seq = 0;
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    for (int batch = 0; batch < 50; ++batch) {
      for (int k = 0; k < 8; ++k) {
        std::byte* slot = from->AcquireSend();
        ASSERT_NE(slot, nullptr);
        const uint32_t len = (gen() % (kMax / 4 + 1)) * 4;
        ++seq;
        for (uint32_t i = 0; i < len; ++i) slot[kWireHeaderBytes + i] = static_cast<std::byte>((seq * 131 + i) & 0xff);
        test::Commit(*from, slot, Dest::Peer(dest), Hdr(MsgKind::kPosition, static_cast<uint32_t>(seq % 7), seq, len));
        want[seq] = len;
      }
      from->Flush();
      Packet m[8];
      while (!want.empty() && want.begin()->first <= seq) {
        ASSERT_LT(Clock::now(), deadline) << want.size() << " messages never arrived";
        const size_t n = to->Poll(m, 8);
        for (size_t i = 0; i < n; ++i) {
          const Message got = MessageOf(m[i]);  // sync's header travels in the payload
          const Header& h = got.h;
          ASSERT_NE(got.payload, nullptr) << "not the sync message sent";
          EXPECT_EQ(m[i].length, kWireHeaderBytes + h.length);
          auto it = want.find(h.seq);
          ASSERT_NE(it, want.end()) << "seq " << h.seq << " arrived twice or was never sent";
          EXPECT_EQ(h.length, it->second);
          EXPECT_EQ(h.source, from->self());
          EXPECT_EQ(h.chunk, h.seq % 7);
          EXPECT_EQ(h.clock, h.seq * 3);
          EXPECT_EQ(h.epoch, 5u);
          EXPECT_EQ(reinterpret_cast<uintptr_t>(m[i].payload) % 16, 0u);
          size_t bad = 0;
          for (uint32_t j = 0; j < h.length; ++j) bad += got.payload[j] != static_cast<std::byte>((h.seq * 131 + j) & 0xff);
          EXPECT_EQ(bad, 0u) << "seq " << h.seq;
          want.erase(it);
        }
        to->Release(n);
        if (n == 0) std::this_thread::yield();
      }
    }
    EXPECT_EQ(to->counters().rejected_total(), 0u);
    EXPECT_EQ(from->counters().sent, seq);
  }
}

// Idle: where the backend has a wait_fd, a message waiting ends the sleep at once (not after
// `most`); without one, it sleeps no_fd; never past its bound either way.
TEST_P(TransportTest, IdleWakesOnAMessageAndKeepsItsBound) {
  using std::chrono::milliseconds, std::chrono::microseconds;
  auto [a, b] = Make(64, 4);
  Clock::time_point t0 = Clock::now();
  b->Idle(milliseconds(300), microseconds(20000));
  const double bounded = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_LT(bounded, 2.0) << "a sleep of 300 ms at most";
  std::byte* slot = a->AcquireSend();
  ASSERT_NE(slot, nullptr);
  test::Commit(*a, slot, Dest::Peer(b->self()), Hdr(MsgKind::kPosition, 1, 1, 16));
  a->Flush();
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(10);
  Packet m[4];
  size_t n = 0;
  double longest = 0;
  while (n == 0 && Clock::now() < deadline) {
    t0 = Clock::now();
    b->Idle(milliseconds(20000), microseconds(1000));
    longest = std::max(longest, std::chrono::duration<double>(Clock::now() - t0).count());
    n = b->Poll(m, 4);
  }
  ASSERT_GT(n, 0u) << "the message never came";
  b->Release(n);
  EXPECT_LT(longest, 5.0) << "a message waiting ends the sleep (here asked for 20 s)";
}

// Every slot committed and nothing flushed or received: "no slot", at once.
TEST_P(TransportTest, FullSenderAnswersNoSlot) {
  auto [a, b] = Make(64, 4);
  for (int i = 0; i < 4; ++i) {
    ASSERT_NE(a->AcquireSend(), nullptr);
    a->CommitSend(Dest::Peer(1), 16);
  }
  EXPECT_EQ(a->AcquireSend(), nullptr);
  EXPECT_GE(a->counters().send_full, 1u);
  std::vector<std::byte> big(4096);
  EXPECT_THROW(a->PostSend(Dest::Peer(1), big.data(), 4096), Bug);
}

// The segment ledger over the backend with 20% drop, duplicate and reorder each way: after
// clean sweeps, master == slave == initial + every increment - exactly the dropped deltas.
TEST_P(TransportTest, SegmentLedgerIsExactUnderFaults) {
  const uint32_t seed = TestSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937 gen(seed);
  const size_t n = 3001;
  const uint32_t chunk = 64;
  std::normal_distribution<float> normal;
  std::vector<float> init(n);
  for (float& x : init) x = normal(gen);
  std::vector<float> master = init, slave = init;
  std::vector<double> total(init.begin(), init.end()), lost(n, 0);
  auto bump = [&](std::vector<float>& w) {
    const size_t at = gen() % n;
    const float u = std::uniform_real_distribution<float>(-0.05f, 0.05f)(gen);
    w[at] += u;
    total[at] += u;
  };
  FaultOptions f;
  f.drop = f.duplicate = f.reorder = 0.2;
  f.seed = seed;
  f.on_drop = [&](const Packet& p) {
    const Message m = MessageOf(p);
    if (m.h.kind != MsgKind::kDelta) return;
    for (uint32_t i = 0; i < m.float_count(); ++i) lost[size_t{m.h.chunk} * chunk + i] += m.floats()[i];
  };
  FaultOptions g = f;
  g.seed = seed + 1;
  auto [a, b] = Make(kWireHeaderBytes + chunk * sizeof(float), 16);
  FaultEndpoint to_slave(std::move(a), f), to_master(std::move(b), g);
  MasterEndpoint me(master.data(), n, chunk, &to_slave, Dest::Peer(1));
  SlaveEndpoint se(slave.data(), n, chunk, &to_master);
  const uint32_t chunks = me.layout().count;
  for (uint32_t r = 0; r < 10 * chunks; ++r) {
    me.PostNextPosition();
    bump(master);
    bump(slave);
    se.PollPositions();
    me.PollDeltas();
  }
  to_slave.set_enabled(false);
  to_master.set_enabled(false);
  auto settle = [&] {  // until every delta sent was applied or dropped, and nothing is held
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (Clock::now() < deadline) {
      to_slave.Flush();
      se.PollPositions();
      me.PollDeltas();
      if (to_slave.held() + to_master.held() == 0 &&
          me.stats().deltas_applied + to_master.counters().dropped == se.stats().positions_applied &&
          se.stats().positions_applied + se.stats().positions_stale + to_slave.counters().dropped ==
              me.stats().positions_sent + to_slave.counters().duplicated)
        return true;
      std::this_thread::yield();
    }
    ADD_FAILURE() << "held " << to_slave.held() << "+" << to_master.held() << " applied "
                  << me.stats().deltas_applied << " dup " << me.stats().deltas_duplicate << " old "
                  << me.stats().deltas_too_old << " ddrop " << to_master.counters().dropped << " papplied "
                  << se.stats().positions_applied << " stale " << se.stats().positions_stale << " pdrop "
                  << to_slave.counters().dropped << " psent " << me.stats().positions_sent << " pdup "
                  << to_slave.counters().duplicated << " ddup " << to_master.counters().duplicated
                  << " rej " << to_slave.counters().rejected_total() + to_master.counters().rejected_total();
    return false;
  };
  ASSERT_TRUE(settle()) << "the link did not settle (10 s deadline)";
  // Clean sweeps, one round trip at a time: each position's delta is applied before the next
  // position leaves. Without the wait, a link with latency (raw Ethernet hands a partly filled
  // receive block over only after its 1 ms timeout) sends the last positions while earlier
  // deltas are still in flight, and the slave ends one step behind the master.
  for (uint32_t r = 0; r < 3 * chunks; ++r) {
    const uint64_t applied = me.stats().deltas_applied;
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    for (bool posted = false; !posted || me.stats().deltas_applied == applied;) {
      ASSERT_LT(Clock::now(), deadline) << "sweep round " << r << ": no delta applied within 5 s";
      if (!posted) posted = me.PostNextPosition();
      to_slave.Flush();
      se.PollPositions();
      me.PollDeltas();
    }
  }
  ASSERT_TRUE(settle()) << "the link did not settle (10 s deadline)";
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    bad += !(std::fabs(master[i] - (total[i] - lost[i])) <= 2e-4);
    bad += !(std::fabs(slave[i] - master[i]) <= 2e-4);
  }
  EXPECT_EQ(bad, 0u);
  EXPECT_GT(to_master.counters().dropped, 0u);
  EXPECT_GT(to_slave.counters().duplicated + to_master.counters().duplicated, 0u);
  EXPECT_GT(to_slave.counters().reordered + to_master.counters().reordered, 0u);
  EXPECT_EQ(me.stats().malformed + se.stats().malformed, 0u);
}

// A peer that goes away latches "peer down" in the other's status, within a deadline.
TEST_P(TransportTest, ClosedPeerBecomesPeerDown) {
  auto [a, b] = Make(64, 4);
  const float p = 1;
  ASSERT_TRUE(b->PostSend(Dest::Peer(0), &p, sizeof p));
  b->Flush();
  Packet m;
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (a->Poll(&m, 1) == 0) ASSERT_LT(Clock::now(), deadline) << "the first message never came";
  EXPECT_EQ(m.length, sizeof p);
  EXPECT_EQ(m.source, 1);
  a->Release(1);
  EXPECT_TRUE(a->status().ok());
  b.reset();
  while (a->status().ok()) {
    ASSERT_LT(Clock::now(), deadline) << "no peer-down within 5 s";
    a->Flush();
    a->Poll(&m, 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(a->status().code, Status::kPeerDown);
  EXPECT_EQ(a->status().peer, 1);
  EXPECT_FALSE(a->status().what.empty());
}

}  // namespace
}  // namespace hogstream
