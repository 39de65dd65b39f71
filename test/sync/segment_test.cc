// Tests of sync/segment: the delta rule conserves every increment made on either side (exactly
// up to float rounding) with a clean link; with drops, duplicates and reordering it loses
// exactly the dropped deltas and nothing else; it stays finite and converges under Hogwild
// threads. Parameterised over chunk size x buffer length (including chunks that do not divide
// the length and chunks longer than the buffer). Seeds are fresh and printed on failure. The
// rule's hooks: codecs with error feedback, staleness weights and weed-out, hand-computed.
#include "sync/local_segment.hpp"
#include "sync/segment.hpp"

#include "base/common.hpp"
#include "transport/fault/endpoint.hpp"
#include "transport/inproc/device.hpp"

#include "test/test_seed.hpp"
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <cmath>
#include <memory>
#include <random>
#include <thread>
#include <tuple>
#include <vector>

namespace hogstream {
namespace HS_UNITY_ID {

constexpr float kTol = 2e-4f;  // float rounding over a few hundred additions of O(1) values

std::vector<float> RandomVector(size_t n, std::mt19937& gen) {
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

// Tracks increments applied to one buffer: the expected total and the sum of magnitudes.
struct Ledger {
  explicit Ledger(const std::vector<float>& init) : total(init.begin(), init.end()), abs(init.size(), 0) {}
  std::vector<double> total, abs;
};

// Adds a random increment to a random range of `w` (of at most 64 elements), into `ledgers`.
void Bump(std::vector<float>& w, std::mt19937& gen, std::vector<Ledger*> ledgers) {
  const size_t n = w.size();
  const size_t begin = std::uniform_int_distribution<size_t>(0, n - 1)(gen);
  const size_t end = std::min(n, begin + 1 + std::uniform_int_distribution<size_t>(0, 63)(gen));
  std::uniform_real_distribution<float> inc(-0.05f, 0.05f);
  for (size_t i = begin; i < end; ++i) {
    const float u = inc(gen);
    w[i] += u;
    for (Ledger* l : ledgers) {
      l->total[i] += u;
      l->abs[i] += std::fabs(u);
    }
  }
}

void ExpectNear(const std::vector<float>& got, const std::vector<double>& want, const char* what) {
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(std::fabs(got[i] - want[i]) <= kTol) && bad++ < 5) {
      ADD_FAILURE() << what << "[" << i << "] = " << got[i] << ", want " << want[i];
    }
  }
  EXPECT_EQ(bad, 0u) << what;
}

std::vector<double> ToDouble(const std::vector<float>& v) { return {v.begin(), v.end()}; }

class SegmentTest : public testing::TestWithParam<std::tuple<uint32_t, size_t>> {
 protected:
  void SetUp() override {
    std::tie(chunk_, n_) = GetParam();
    seed_ = TestSeed();
    gen_.seed(seed_);
    init_ = RandomVector(n_, gen_);
  }
  uint32_t chunk_;
  size_t n_;
  uint32_t seed_;
  std::mt19937 gen_;
  std::vector<float> init_;
};

// A slave "solver" and a master "solver" add increments between sweeps; after final sweeps both
// buffers hold initial + all increments.
TEST_P(SegmentTest, ConservesIncrementsWithoutFaults) {
  SCOPED_TRACE(testing::Message() << "seed " << seed_);
  std::vector<float> master = init_, slave = init_;
  Ledger ledger(init_);
  SegmentOptions opt;
  opt.chunk_floats = chunk_;
  Segment seg(master.data(), slave.data(), n_, opt);
  for (int sweep = 0; sweep < 20; ++sweep) {
    for (int k = 0; k < 3; ++k) Bump(slave, gen_, {&ledger});
    for (int k = 0; k < 3; ++k) Bump(master, gen_, {&ledger});
    seg.Sweep();
  }
  seg.Sweep();
  ExpectNear(master, ledger.total, "master");
  ExpectNear(slave, ledger.total, "slave");
  const SegmentStats st = seg.stats();
  const uint64_t chunks = (n_ + chunk_ - 1) / chunk_;
  EXPECT_EQ(st.sweeps, 21u);
  EXPECT_EQ(st.chunks_sent, 21 * chunks);
  EXPECT_EQ(st.bytes_moved, 21 * 2 * n_ * sizeof(float));
  EXPECT_EQ(st.dropped + st.duplicated + st.reordered + st.stale_ignored, 0u);
}

// Endpoints driven by hand over a lossy link (20% drop, duplicate, reorder each way), with
// increments landing on both sides while each chunk's position and delta are in flight. After
// a few clean sweeps: master == slave == initial + increments - exactly the dropped deltas.
TEST_P(SegmentTest, LosesExactlyTheDroppedDeltasUnderFaults) {
  SCOPED_TRACE(testing::Message() << "seed " << seed_);
  std::vector<float> master = init_, slave = init_;
  Ledger ledger(init_), slave_incs(std::vector<float>(n_, 0.f));
  std::vector<double> lost(n_, 0);
  uint64_t lost_deltas = 0;
  FaultOptions f;
  f.drop = f.duplicate = f.reorder = 0.2;
  f.seed = seed_;
  f.on_drop = [&](const Packet& p) {
    const Message m = MessageOf(p);
    if (m.h.kind != MsgKind::kDelta) return;
    ++lost_deltas;
    for (uint32_t i = 0; i < m.float_count(); ++i) lost[size_t{m.h.chunk} * chunk_ + i] += m.floats()[i];
  };
  FaultOptions g = f;
  g.seed = seed_ + 1;
  InprocOptions o;
  o.max_payload = kWireHeaderBytes + chunk_ * sizeof(float);
  o.slots = 8;
  auto [a, b] = InprocDevice::MakePair(o);
  auto to_slave = std::make_unique<FaultEndpoint>(std::move(a), f);
  auto to_master = std::make_unique<FaultEndpoint>(std::move(b), g);
  MasterEndpoint me(master.data(), n_, chunk_, to_slave.get(), Dest::Peer(1));
  SlaveEndpoint se(slave.data(), n_, chunk_, to_master.get());
  const uint32_t chunks = me.layout().count;
  const int rounds = static_cast<int>(std::max<uint32_t>(200, 10 * chunks));
  for (int r = 0; r < rounds; ++r) {
    me.PostNextPosition();
    Bump(master, gen_, {&ledger});
    Bump(slave, gen_, {&ledger, &slave_incs});
    se.PollPositions();
    Bump(master, gen_, {&ledger});
    me.PollDeltas();
  }
  // Stopping here loses at most what the slave added: all finite, within sum |slave increments|.
  for (size_t i = 0; i < n_; ++i) {
    ASSERT_TRUE(std::isfinite(master[i]) && std::isfinite(slave[i])) << i;
    ASSERT_LE(std::fabs(master[i] - ledger.total[i]), slave_incs.abs[i] + kTol) << i;
  }
  to_slave->set_enabled(false);
  to_master->set_enabled(false);
  for (uint32_t r = 0; r < 3 * chunks; ++r) {
    me.PostNextPosition();
    se.PollPositions();
    me.PollDeltas();
  }
  std::vector<double> want(n_);
  for (size_t i = 0; i < n_; ++i) want[i] = ledger.total[i] - lost[i];
  ExpectNear(master, want, "master");
  ExpectNear(slave, ToDouble(master), "slave");

  const TransportCounters down = to_slave->counters(), up = to_master->counters();
  EXPECT_EQ(up.dropped, lost_deltas);
  EXPECT_GT(down.dropped + up.dropped, 0u);
  EXPECT_GT(down.duplicated + up.duplicated, 0u);
  EXPECT_GT(down.reordered + up.reordered, 0u);
  const auto ms = me.stats();
  const auto ss = se.stats();
  EXPECT_EQ(ms.malformed + ss.malformed + ms.deltas_too_old, 0u);
  EXPECT_GT(ss.positions_stale + ms.deltas_duplicate, 0u);  // duplicates were seen and ignored
  // Every delta sent either arrived once (applied) or was dropped.
  EXPECT_EQ(ms.deltas_applied + up.dropped, ss.positions_applied);
}

// The daemon over a lossy link: increments made while it is stopped, then it runs, then clean
// sweeps: initial + increments - dropped deltas.
TEST_P(SegmentTest, DaemonWithFaultsLosesOnlyDroppedDeltas) {
  SCOPED_TRACE(testing::Message() << "seed " << seed_);
  std::vector<float> master = init_, slave = init_;
  Ledger ledger(init_);
  std::vector<double> lost(n_, 0);
  SegmentOptions opt;
  opt.chunk_floats = chunk_;
  opt.faults.drop = opt.faults.duplicate = opt.faults.reorder = 0.2;
  opt.faults.seed = seed_;
  opt.faults.on_drop = [&](const Packet& p) {  // runs on the daemon thread; read after Stop
    const Message m = MessageOf(p);
    if (m.h.kind != MsgKind::kDelta) return;
    for (uint32_t i = 0; i < m.float_count(); ++i) lost[size_t{m.h.chunk} * chunk_ + i] += m.floats()[i];
  };
  Segment seg(master.data(), slave.data(), n_, opt);
  for (int phase = 0; phase < 5; ++phase) {
    for (int k = 0; k < 20; ++k) Bump(slave, gen_, {&ledger});
    for (int k = 0; k < 20; ++k) Bump(master, gen_, {&ledger});
    seg.Start();
    const uint64_t goal = phase + 1;  // at least 3 sweeps and 100 messages per phase
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while ((seg.stats().sweeps < 3 * goal || seg.stats().chunks_sent < 100 * goal) &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::yield();
    seg.Stop();
    ASSERT_GE(seg.stats().sweeps, 3 * goal) << "the daemon stalled (20 s deadline)";
  }
  seg.Sweep();
  seg.Sweep();
  std::vector<double> want(n_);
  for (size_t i = 0; i < n_; ++i) want[i] = ledger.total[i] - lost[i];
  ExpectNear(master, want, "master");
  ExpectNear(slave, ToDouble(master), "slave");
  const SegmentStats st = seg.stats();
  EXPECT_GT(st.dropped, 0u);
  EXPECT_GT(st.duplicated, 0u);
  EXPECT_GT(st.stale_ignored, 0u);
}

INSTANTIATE_TEST_SUITE_P(ChunkXLength, SegmentTest,
                         testing::Combine(testing::Values(7u, 64u, 1000u, 4096u),
                                          testing::Values(size_t{5}, size_t{1000}, size_t{10007})),
                         [](const auto& info) {
                           return "chunk" + std::to_string(std::get<0>(info.param)) + "_n" +
                                  std::to_string(std::get<1>(info.param));
                         });

TEST(SegmentAtomicTest, ConservesIncrementsWithAtomicAccess) {
  const size_t n = 3001;
  std::mt19937 gen(TestSeed());
  const std::vector<float> init = RandomVector(n, gen);
  std::vector<float> master = init, slave = init;
  Ledger ledger(init);
  SegmentOptions opt;
  opt.chunk_floats = 100;
  opt.access = Access::kAtomic;
  Segment seg(master.data(), slave.data(), n, opt);
  for (int sweep = 0; sweep < 10; ++sweep) {
    for (int k = 0; k < 10; ++k) Bump(slave, gen, {&ledger});
    for (int k = 0; k < 10; ++k) Bump(master, gen, {&ledger});
    seg.Sweep();
  }
  seg.Sweep();
  ExpectNear(master, ledger.total, "master");
  ExpectNear(slave, ledger.total, "slave");
}

// A lost slave copy (non-finite values, its last progress unsent) re-takes the master whole,
// with the daemon running or not: slave == master afterwards, the master untouched (nothing of
// the lost copy came back), and the daemon runs again as it did. A master that is not finite
// either cannot be re-taken from: false, and the master still untouched.
TEST(SegmentRetakeTest, ALostCopyTakesTheMasterWholeAndSendsNothing) {
  const size_t n = 3001;
  std::mt19937 gen(TestSeed());
  for (const bool daemon : {false, true}) {
    SCOPED_TRACE(daemon ? "daemon running" : "daemon stopped");
    const std::vector<float> init = RandomVector(n, gen);
    std::vector<float> master = init, slave = init;
    SegmentOptions opt;
    opt.chunk_floats = 100;
    Segment seg(master.data(), slave.data(), n, opt);
    if (daemon) seg.Start();
    // Progress on both sides, then the copy is lost: every third value NaN, the rest moved.
    Bump(master, gen, {});
    for (size_t i = 0; i < n; ++i) slave[i] = i % 3 ? slave[i] + 0.5f : std::numeric_limits<float>::quiet_NaN();
    if (daemon) {  // let it sweep the lost copy a while: a delta of it must not reach the master
      // (the master refuses a non-finite delta; the finite chunks' +0.5 are progress it takes)
      ASSERT_TRUE(seg.AwaitSweeps(2, std::chrono::seconds(10)));
    }
    const std::vector<float> before = master;
    ASSERT_TRUE(seg.Retake());
    EXPECT_EQ(seg.running(), daemon) << "the daemon runs again as it did";
    if (daemon) seg.Stop();
    for (size_t i = 0; i < n; ++i) {
      ASSERT_TRUE(std::isfinite(master[i])) << i;
      ASSERT_EQ(master[i], before[i]) << i << ": the re-take sent progress back";
      ASSERT_EQ(slave[i], master[i]) << i << ": not re-taken";
    }
  }
  const std::vector<float> init = RandomVector(n, gen);
  std::vector<float> master = init, slave = init;
  master[1234] = std::numeric_limits<float>::infinity();
  SegmentOptions opt;
  opt.chunk_floats = 100;
  Segment seg(master.data(), slave.data(), n, opt);
  EXPECT_FALSE(seg.Retake()) << "a non-finite master position is refused, so its chunk is not re-taken";
}

// Hogwild: four threads hammer the master buffer, one thread the slave buffer, while the daemon
// syncs them (optionally over a lossy link). Increments lost to races and drops are allowed;
// what must hold: all finite, master == slave after stopping and sweeping, and most of each
// side's increments reached the other side. Each side adds only positive increments to its own
// half, so a segment that moved nothing (or lost everything) shows as a missing sum.
class SegmentHogwildTest : public testing::TestWithParam<bool> {};

// A wait for sweeps (a policy's fresh-round refresh, a solver's end) is told by the daemon at
// each sweep: of ten waits of one sweep each, most end well within the board's 50 ms recheck
// (a loaded host may hold a few back); it ends false, at once, when the daemon stops under it or is not running, and the
// sweeps it asked for have happened when it says true.
TEST(SegmentAwaitTest, AWaitEndsAtItsSweepsAndWhenTheDaemonStops) {
  using Clock = std::chrono::steady_clock;
  std::mt19937 gen(TestSeed());
  const size_t n = 1000;
  std::vector<float> master = RandomVector(n, gen), slave = master;
  SegmentOptions opt;
  opt.chunk_floats = 100;
  Segment seg(master.data(), slave.data(), n, opt);
  EXPECT_FALSE(seg.AwaitSweeps(1, std::chrono::seconds(10))) << "no daemon: no sweep comes";
  seg.Start();
  const uint64_t before = seg.stats().sweeps;
  int prompt = 0;  // waits that ended well within the board's 50 ms recheck
  for (int i = 0; i < 10; ++i) {
    const auto t0 = Clock::now();
    ASSERT_TRUE(seg.AwaitSweeps(1, std::chrono::seconds(10))) << i;
    prompt += Clock::now() - t0 < std::chrono::milliseconds(25);
  }
  EXPECT_GE(prompt, 5) << "the waits were not told of the sweeps (each waited for the board's recheck)";
  EXPECT_GE(seg.stats().sweeps, before + 10);
  bool got = true;
  double waited = 0;
  std::thread waiter([&] {
    const auto w0 = Clock::now();
    got = seg.AwaitSweeps(uint64_t{1} << 40, std::chrono::seconds(30));
    waited = std::chrono::duration<double>(Clock::now() - w0).count();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  seg.Stop();
  waiter.join();
  EXPECT_FALSE(got);
  EXPECT_LT(waited, 5.0) << "the wait outlived the daemon";
}

TEST_P(SegmentHogwildTest, ThreadsHammeringBothSidesConverge) {
  const size_t n = 100000, half = n / 2;
  const uint32_t seed = TestSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937 gen(seed);
  const std::vector<float> init = RandomVector(n, gen);
  std::vector<float> master = init, slave = init;
  SegmentOptions opt;
  opt.chunk_floats = 1024;
  if (GetParam()) opt.faults.drop = opt.faults.duplicate = opt.faults.reorder = 0.2;
  opt.faults.seed = seed;
  Segment seg(master.data(), slave.data(), n, opt);
  seg.Start();
  std::atomic<bool> stop{false};
  // Adds increments in [0, 2e-3) to w[begin, end); returns their sum (racy writes by design:
  // four threads share the master's half).
  auto hammer = [&stop](float* w, size_t begin, size_t end, uint32_t s, double* added) {
    std::mt19937 g(s);
    std::uniform_int_distribution<size_t> at(begin, end - 64);
    std::uniform_real_distribution<float> inc(0.f, 2e-3f);
    double sum = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      const size_t b = at(g);
      for (size_t i = b; i < b + 64; ++i) {
        const float u = inc(g);
        w[i] += u;
        sum += u;
      }
    }
    *added = sum;
  };
  std::vector<double> added(5, 0);
  std::vector<std::thread> solvers;
  for (uint32_t t = 0; t < 4; ++t) solvers.emplace_back(hammer, master.data(), 0, half, seed + 1 + t, &added[t]);
  solvers.emplace_back(hammer, slave.data(), half, n, seed + 99, &added[4]);
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while ((seg.stats().sweeps < 20 || std::chrono::steady_clock::now() < until) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  stop = true;
  for (auto& t : solvers) t.join();
  seg.Stop();
  EXPECT_GE(seg.stats().sweeps, 20u) << "the daemon stalled (20 s deadline)";
  seg.Sweep();
  seg.Sweep();
  for (size_t i = 0; i < n; ++i) ASSERT_TRUE(std::isfinite(master[i]) && std::isfinite(slave[i])) << i;
  ExpectNear(slave, ToDouble(master), "slave");
  auto growth = [&](const std::vector<float>& w, size_t b, size_t e) {
    double g = 0;
    for (size_t i = b; i < e; ++i) g += static_cast<double>(w[i]) - init[i];
    return g;
  };
  const double master_added = added[0] + added[1] + added[2] + added[3];
  // What the master's threads added reached the slave, and the slave's reached the master:
  // most of it (races lose some on both sides; the lossy link drops 20% of deltas).
  EXPECT_GT(growth(slave, 0, half), 0.5 * master_added) << "master_added " << master_added;
  EXPECT_GT(growth(master, half, n), 0.5 * added[4]) << "slave_added " << added[4];
  EXPECT_LT(growth(master, half, n), 1.001 * added[4] + 0.05) << "slave_added " << added[4];
}

// One transport slot per direction and every message held back for reordering: the daemon
// still moves the weights, and Sweep still syncs everything (it used to wedge, and Sweep then
// returned having synced nothing).
TEST(SegmentOneSlotTest, ReorderingWithOneSlotStillSyncs) {
  const size_t n = 5000;
  std::mt19937 gen(TestSeed());
  const std::vector<float> init = RandomVector(n, gen);
  std::vector<float> master = init, slave = init;
  Ledger ledger(init);
  SegmentOptions opt;
  opt.chunk_floats = 500;
  opt.slots = 1;
  opt.faults.reorder = 1.0;
  Segment seg(master.data(), slave.data(), n, opt);
  for (int phase = 0; phase < 3; ++phase) {
    for (int k = 0; k < 20; ++k) Bump(slave, gen, {&ledger});
    for (int k = 0; k < 20; ++k) Bump(master, gen, {&ledger});
    seg.Start();
    const uint64_t goal = 2 * (phase + 1);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (seg.stats().sweeps < goal && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    seg.Stop();
    ASSERT_GE(seg.stats().sweeps, goal) << "the one-slot link wedged";
  }
  for (int k = 0; k < 20; ++k) Bump(slave, gen, {&ledger});
  seg.Sweep();
  seg.Sweep();
  ExpectNear(master, ledger.total, "master");
  ExpectNear(slave, ledger.total, "slave");
}

// The master's window: at most `window` positions await their delta; answers reopen it; a
// position superseded by a newer one of its chunk counts once; an answer that never comes
// stops counting after answer_timeout_us (so a lossy link never stalls the stream).
TEST(SegmentWindowTest, BoundsPositionsAwaitingDeltas) {
  const uint32_t chunk = 64, chunks = 10;
  const size_t n = size_t{chunk} * chunks;
  std::mt19937 gen(TestSeed());
  std::vector<float> master = RandomVector(n, gen), slave = master;
  InprocOptions o;
  o.max_payload = kWireHeaderBytes + chunk * sizeof(float);
  o.slots = 16;
  auto [a, b] = InprocDevice::MakePair(o);
  FlowOptions flow;
  flow.window = 3;
  flow.answer_timeout_us = 10'000'000;  // never, in this test
  MasterEndpoint me(master.data(), n, chunk, a.get(), Dest::Peer(1), Access::kPlain, flow);
  SlaveEndpoint se(slave.data(), n, chunk, b.get());
  EXPECT_EQ(me.PostPositions(10), 3u);
  EXPECT_EQ(me.in_flight(), 3u);
  EXPECT_EQ(me.PostPositions(10), 0u) << "the window is full";
  EXPECT_EQ(se.PollPositions(), 3u);
  EXPECT_EQ(me.PollDeltas(), 3u);
  EXPECT_EQ(me.in_flight(), 0u);
  EXPECT_EQ(me.PostPositions(2), 2u);
  EXPECT_EQ(me.next_chunk(), 5u);
  EXPECT_EQ(me.PostPositions(10), 1u);
  EXPECT_EQ(se.PollPositions(), 3u);
  EXPECT_EQ(me.PollDeltas(), 3u);
  EXPECT_EQ(me.stats().unanswered, 0u);
}

TEST(SegmentWindowTest, NewerPositionOfAChunkSupersedesTheOlder) {
  const uint32_t chunk = 32;
  std::mt19937 gen(TestSeed());
  std::vector<float> master = RandomVector(chunk, gen), slave = master;
  InprocOptions o;
  o.max_payload = kWireHeaderBytes + chunk * sizeof(float);
  o.slots = 16;
  auto [a, b] = InprocDevice::MakePair(o);
  FlowOptions flow;
  flow.window = 2;
  flow.answer_timeout_us = 10'000'000;
  MasterEndpoint me(master.data(), chunk, chunk, a.get(), Dest::Peer(1), Access::kPlain, flow);
  SlaveEndpoint se(slave.data(), chunk, chunk, b.get());
  EXPECT_EQ(me.PostPositions(5), 5u) << "one chunk: each position supersedes the last";
  EXPECT_EQ(me.in_flight(), 1u);
  EXPECT_EQ(se.PollPositions(), 5u);
  EXPECT_EQ(me.PollDeltas(), 5u);
  EXPECT_EQ(me.in_flight(), 0u);
}

TEST(SegmentWindowTest, LostAnswersStopCountingAfterTheTimeout) {
  const uint32_t chunk = 64, chunks = 8;
  const size_t n = size_t{chunk} * chunks;
  std::mt19937 gen(TestSeed());
  std::vector<float> master = RandomVector(n, gen), slave = master;
  InprocOptions o;
  o.max_payload = kWireHeaderBytes + chunk * sizeof(float);
  o.slots = 16;
  auto [a, b] = InprocDevice::MakePair(o);
  FaultOptions all;
  all.drop = 1.0;  // every delta is lost
  FaultEndpoint to_master(std::move(b), all);
  FlowOptions flow;
  flow.window = 2;
  flow.answer_timeout_us = 20'000;
  MasterEndpoint me(master.data(), n, chunk, a.get(), Dest::Peer(1), Access::kPlain, flow);
  SlaveEndpoint se(slave.data(), n, chunk, &to_master);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(me.PostPositions(8), 2u);
  EXPECT_EQ(se.PollPositions(), 2u);
  EXPECT_EQ(me.PollDeltas(), 0u);
  if (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(15)) {
    EXPECT_EQ(me.PostPositions(8), 0u) << "still awaiting the lost answers";
  }
  size_t posted = 0;
  const auto deadline = t0 + std::chrono::seconds(10);
  while ((posted = me.PostPositions(8)) == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_EQ(posted, 2u) << "the window reopened after the timeout";
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(20));
  EXPECT_EQ(me.stats().unanswered, 2u);
  EXPECT_EQ(to_master.counters().dropped, 2u);
}

// A transport double for the rule's bookkeeping: what the endpoint sends is recorded, and the
// test delivers messages with any source, epoch and seq it likes (several slaves, a restarted
// master) without a network.
class ScriptedTransport final : public Transport {
 public:
  // `max_values`: bytes of values one message carries (after sync's header).
  explicit ScriptedTransport(uint32_t max_values) : max_(max_values) {}
  struct Sent {
    Dest to;
    Header h;
    std::vector<float> payload;
  };
  std::vector<Sent> sent;
  void Deliver(Header h, PeerId from, std::vector<float> payload) {
    h.length = static_cast<uint32_t>(payload.size() * sizeof(float));
    std::vector<std::byte> bytes(kWireHeaderBytes + h.length);
    PutHeader(bytes.data(), h);
    if (h.length) std::memcpy(bytes.data() + kWireHeaderBytes, payload.data(), h.length);
    inbox_.push_back({from, std::move(bytes)});
  }
  PeerId self() const override { return 0; }
  Caps caps() const override {
    Caps c;
    c.max_payload = kWireHeaderBytes + max_;
    c.send_slots = 64;
    c.max_batch = 64;
    return c;
  }
  std::byte* AcquireSend() override { return reinterpret_cast<std::byte*>(slot_.data()); }
  void CommitSend(Dest to, uint32_t length) override {
    const std::byte* slot = reinterpret_cast<const std::byte*>(slot_.data());
    Header h;
    ASSERT_TRUE(GetHeader(slot, length, self(), &h)) << "the endpoint sent something that is no sync message";
    const float* values = reinterpret_cast<const float*>(slot + kWireHeaderBytes);
    sent.push_back({to, h, std::vector<float>(values, values + h.length / sizeof(float))});
  }
  void Flush() override {}
  size_t Poll(Packet* out, size_t max) override {
    size_t n = 0;
    for (; n < max && held_ + n < inbox_.size(); ++n) {
      const auto& [from, bytes] = inbox_[held_ + n];
      out[n] = Packet{from, static_cast<uint32_t>(bytes.size()), bytes.data()};
    }
    held_ += n;
    return n;
  }
  void Release(size_t n) override {
    inbox_.erase(inbox_.begin(), inbox_.begin() + static_cast<std::ptrdiff_t>(n));
    held_ -= n;
  }

 private:
  uint32_t max_;
  std::vector<float> slot_ = std::vector<float>(1024 + kWireHeaderBytes / sizeof(float));
  std::deque<std::pair<PeerId, std::vector<std::byte>>> inbox_;
  size_t held_ = 0;
};

Header Delta(uint32_t chunk, uint64_t seq, uint32_t epoch) {
  Header h;
  h.kind = MsgKind::kDelta;
  h.chunk = chunk;
  h.seq = seq;
  h.epoch = epoch;
  return h;
}

// Two slaves answer one multicast position: both deltas are applied (a replay window per slave,
// not per chunk); a slave's duplicate is dropped; an answer to an earlier incarnation's position
// (another epoch) is dropped and counted.
TEST(SegmentPeersTest, EverySlavesAnswerToAMulticastPositionIsApplied) {
  std::mt19937 gen(TestSeed());
  std::vector<float> w = RandomVector(8, gen);
  const std::vector<float> w0 = w;
  ScriptedTransport t(4 * sizeof(float));
  MasterEndpoint me(w.data(), w.size(), 4, &t, Dest::Group(1));
  me.set_epoch(7);
  ASSERT_EQ(me.PostPositions(1), 1u);
  ASSERT_EQ(t.sent.size(), 1u);
  EXPECT_TRUE(t.sent[0].to.group);
  EXPECT_EQ(t.sent[0].h.epoch, 7u);
  EXPECT_EQ(t.sent[0].h.seq, 1u);
  const std::vector<float> d2 = RandomVector(4, gen), d3 = RandomVector(4, gen), d4 = RandomVector(4, gen);
  t.Deliver(Delta(0, 1, 7), 2, d2);
  t.Deliver(Delta(0, 1, 7), 3, d3);
  t.Deliver(Delta(0, 1, 7), 2, d2);  // slave 2 again: a duplicate
  t.Deliver(Delta(0, 1, 6), 4, d4);  // an earlier incarnation's seq 1
  EXPECT_EQ(me.PollDeltas(), 2u);
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(w[i], w0[i] + d2[i] + d3[i], 1e-6) << i;
  for (size_t i = 4; i < 8; ++i) EXPECT_EQ(w[i], w0[i]) << i;
  const auto st = me.stats();
  EXPECT_EQ(st.deltas_applied, 2u);
  EXPECT_EQ(st.deltas_duplicate, 1u);
  EXPECT_EQ(st.deltas_other_epoch, 1u);
  EXPECT_EQ(st.malformed, 0u);
}

// A multicast position with a window awaits every receiver's delta: the window stays closed
// until the slowest has answered (a duplicate of the fast one's answer does not count twice).
TEST(SegmentPeersTest, AMulticastWindowWaitsForEveryReceiver) {
  std::mt19937 gen(TestSeed());
  std::vector<float> w = RandomVector(8, gen);
  ScriptedTransport t(4 * sizeof(float));
  FlowOptions flow;
  flow.window = 1;
  flow.answer_timeout_us = 10'000'000;  // never, in this test
  MasterEndpoint me(w.data(), w.size(), 4, &t, Dest::Group(1), Access::kPlain, flow);
  me.set_epoch(3);
  me.set_receivers(2);
  ASSERT_EQ(me.PostPositions(4), 1u);
  EXPECT_EQ(me.PostPositions(4), 0u) << "window of 1";
  t.Deliver(Delta(0, 1, 3), 2, RandomVector(4, gen));
  t.Deliver(Delta(0, 1, 3), 2, RandomVector(4, gen));  // the fast receiver's duplicate
  EXPECT_EQ(me.PollDeltas(), 1u);
  EXPECT_EQ(me.in_flight(), 1u) << "receiver 3 has not answered";
  EXPECT_EQ(me.PostPositions(4), 0u);
  t.Deliver(Delta(0, 1, 3), 3, RandomVector(4, gen));
  EXPECT_EQ(me.PollDeltas(), 1u);
  EXPECT_EQ(me.in_flight(), 0u);
  EXPECT_EQ(me.PostPositions(4), 1u) << "both answered: the window reopens";
  EXPECT_EQ(me.stats().deltas_duplicate, 1u);
}

// A restarted master (a newer epoch, seqs from 1 again) is answered; positions of the older
// incarnation that arrive late are ignored; the delta echoes the position's epoch.
TEST(SegmentPeersTest, SlaveFollowsANewerEpochAndIgnoresAnOlderOne) {
  std::mt19937 gen(TestSeed());
  std::vector<float> w = RandomVector(4, gen);
  ScriptedTransport t(4 * sizeof(float));
  SlaveEndpoint se(w.data(), w.size(), 4, &t);
  Header p;
  p.kind = MsgKind::kPosition;
  p.chunk = 0;
  auto position = [&](uint64_t seq, uint32_t epoch) {
    p.seq = seq;
    p.epoch = epoch;
    t.Deliver(p, 0, RandomVector(4, gen));
    return se.PollPositions();
  };
  EXPECT_EQ(position(5, 10), 1u);
  EXPECT_EQ(position(1, 11), 1u) << "a restarted master's first position";
  EXPECT_EQ(position(9, 10), 0u) << "the old master's, late";
  EXPECT_EQ(position(1, 11), 0u) << "a duplicate";
  EXPECT_EQ(position(2, 11), 1u);
  ASSERT_EQ(t.sent.size(), 3u);
  EXPECT_EQ(t.sent[0].h.epoch, 10u);
  EXPECT_EQ(t.sent[1].h.epoch, 11u);
  EXPECT_EQ(t.sent[1].h.seq, 1u);
  EXPECT_EQ(t.sent[2].h.seq, 2u);
  EXPECT_EQ(se.stats().positions_stale, 2u);
}

// Every machine masters a contiguous share of the chunks, in list order, each chunk once.
TEST(SegmentPeersTest, ShareChunksGivesEveryPeerAContiguousShare) {
  const std::vector<PeerId> owner = ShareChunks(10, {5, 1, 7});
  EXPECT_EQ(owner, (std::vector<PeerId>{5, 5, 5, 5, 1, 1, 1, 7, 7, 7}));
  EXPECT_EQ(ShareChunks(2, {0, 1, 2}), (std::vector<PeerId>{0, 1}));
  EXPECT_THROW(ShareChunks(4, {}), Error);
}

// With weights the runs are in proportion (largest remainders take the chunks left over);
// equal weights share as without; on random counts and weights, every chunk has one owner and
// each run is within one chunk of its quota.
TEST(SegmentPeersTest, ShareChunksWithWeightsGivesRunsInProportion) {
  EXPECT_EQ(ShareChunks(13, {0, 1, 2, 3}, {1, 1, 1, 0.25}),
            (std::vector<PeerId>{0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3}));  // quotas 4, 4, 4, 1
  EXPECT_EQ(ShareChunks(10, {0, 1, 2}, {1, 1, 0.5}), (std::vector<PeerId>{0, 0, 0, 0, 1, 1, 1, 1, 2, 2}));  // 4, 4, 2
  EXPECT_EQ(ShareChunks(10, {5, 1, 7}, {2, 2, 2}), ShareChunks(10, {5, 1, 7}));
  // quotas 3.33 and 6.67: the chunk left over goes to the larger fraction
  EXPECT_EQ(ShareChunks(10, {0, 1}, {1, 2}), (std::vector<PeerId>{0, 0, 0, 1, 1, 1, 1, 1, 1, 1}));
  std::mt19937 gen(TestSeed());
  std::uniform_real_distribution<double> weight(0.05, 4);
  for (int trial = 0; trial < 200; ++trial) {
    const uint32_t count = gen() % 2000;
    const size_t k = 1 + gen() % 9;
    std::vector<PeerId> peers;
    std::vector<double> w;
    double sum = 0;
    for (size_t r = 0; r < k; ++r) {
      peers.push_back(static_cast<PeerId>(r));
      w.push_back(weight(gen));
      sum += w.back();
    }
    const std::vector<PeerId> owner = ShareChunks(count, peers, w);
    ASSERT_EQ(owner.size(), count);
    ASSERT_TRUE(std::is_sorted(owner.begin(), owner.end())) << "contiguous runs, in list order";
    for (size_t r = 0; r < k; ++r) {
      const double quota = count * w[r] / sum;
      const auto n = static_cast<double>(std::count(owner.begin(), owner.end(), peers[r]));
      ASSERT_LT(std::abs(n - quota), 1.0) << "peer " << r << " of " << k << ", " << count << " chunks";
    }
  }
}

// A master streams only its own chunks, round-robin; a sweep is one pass over them.
TEST(SegmentPeersTest, MasterStreamsOnlyTheChunksItOwns) {
  std::mt19937 gen(TestSeed());
  std::vector<float> w = RandomVector(20, gen);  // 5 chunks of 4
  ScriptedTransport t(4 * sizeof(float));
  MasterEndpoint me(w.data(), w.size(), 4, &t, Dest::Group(1));
  me.set_owned({3, 1});
  EXPECT_EQ(me.PostPositions(5), 5u);
  std::vector<uint32_t> chunks;
  for (const auto& sent : t.sent) chunks.push_back(sent.h.chunk);
  EXPECT_EQ(chunks, (std::vector<uint32_t>{3, 1, 3, 1, 3}));
  EXPECT_EQ(t.sent[4].h.seq, 3u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(t.sent[4].payload[i], w[12 + i]);
  EXPECT_EQ(me.stats().sweeps, 2u);
  EXPECT_THROW(me.set_owned({}), Error);
  EXPECT_THROW(me.set_owned({5}), Error);
}

// A slave takes a chunk's positions only from that chunk's owner, and none for a chunk it owns.
TEST(SegmentPeersTest, SlaveTakesPositionsOnlyFromTheChunksOwner) {
  std::mt19937 gen(TestSeed());
  std::vector<float> w = RandomVector(12, gen);  // 3 chunks of 4
  ScriptedTransport t(4 * sizeof(float));
  SlaveEndpoint se(w.data(), w.size(), 4, &t);
  se.set_owners({0, 1, 2}, /*self=*/2);
  Header p;
  p.kind = MsgKind::kPosition;
  p.seq = 1;
  auto position = [&](uint32_t chunk, PeerId from) {
    p.chunk = chunk;
    t.Deliver(p, from, RandomVector(4, gen));
    return se.PollPositions();
  };
  EXPECT_EQ(position(0, 0), 1u);
  EXPECT_EQ(position(1, 0), 0u) << "peer 0 does not own chunk 1";
  EXPECT_EQ(position(1, 1), 1u);
  EXPECT_EQ(position(2, 2), 0u) << "chunk 2 is this machine's own";
  EXPECT_EQ(se.stats().positions_foreign, 2u);
  EXPECT_EQ(se.stats().positions_applied, 2u);
  ASSERT_EQ(t.sent.size(), 2u);
  EXPECT_EQ(t.sent[1].to.id, 1u) << "the delta goes back to the chunk's owner";
  EXPECT_THROW(se.set_owners({0, 1}, 2), Error);
}

// A re-share: the chunks leaving this machine go out as finals with the values its slave side
// took as `last` (set_owners), not the weights read again: a solver's write in between then
// goes out once (in w - last, with this copy's next answer), not also in the final.
TEST(SegmentPeersTest, AChunkHandedOnGoesOutWithTheValuesItsSlaveTookAsLast) {
  std::mt19937 gen(TestSeed());
  std::vector<float> w = RandomVector(12, gen);  // 3 chunks of 4
  ScriptedTransport t(4 * sizeof(float));
  SlaveEndpoint se(w.data(), w.size(), 4, &t);
  se.set_owners({0, 0, 0}, /*self=*/0);
  MasterEndpoint me(w.data(), w.size(), 4, &t, Dest::Peer(1));
  me.set_owned({0, 1, 2});
  se.set_owners({0, 1, 1}, /*self=*/0);  // chunks 1 and 2 go to machine 1
  const std::vector<float> taken(w.begin() + 4, w.end());
  for (size_t i = 4; i < 12; ++i) w[i] += 1.f;  // a solver's step lands before the finals go
  ASSERT_TRUE(me.PostFinals({1, 2}, se.last()));
  ASSERT_EQ(t.sent.size(), 2u);
  for (size_t k = 0; k < 2; ++k) {
    EXPECT_EQ(t.sent[k].h.kind, MsgKind::kFinal);
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(t.sent[k].payload[i], taken[4 * k + i]) << "chunk " << k + 1;
  }
  for (size_t i = 4; i < 12; ++i) EXPECT_FLOAT_EQ(w[i] - se.last()[i], 1.f) << "the step is this copy's to send, once";
  // Read from the weights instead, the final would carry the step as well.
  ASSERT_TRUE(me.PostFinals({1}));
  EXPECT_FLOAT_EQ(t.sent[2].payload[0], taken[0] + 1.f);
}

INSTANTIATE_TEST_SUITE_P(CleanAndLossy, SegmentHogwildTest, testing::Bool(),
                         [](const auto& info) { return info.param ? "lossy" : "clean"; });

TEST(SegmentLayoutTest, ChunksCutAtParameterBoundariesNeverStraddleOne) {
  // LeNet's blobs: conv1 500 + 20, conv2 25000 + 50, ip1 400000 + 500, ip2 5000 + 10.
  const std::vector<size_t> sizes = {500, 20, 25000, 50, 400000, 500, 5000, 10};
  std::vector<size_t> starts;
  size_t n = 0;
  for (size_t s : sizes) {
    starts.push_back(n);
    n += s;
  }
  const ChunkLayout layout(n, 2048, starts);
  size_t covered = 0;
  for (uint32_t c = 0; c < layout.count; ++c) {
    ASSERT_EQ(layout.offset(c), covered) << "chunk " << c << " follows the one before";
    ASSERT_GT(layout.length(c), 0u);
    ASSERT_LE(layout.length(c), 2048u);
    for (size_t b : starts)  // a boundary may start a chunk, never fall inside one
      EXPECT_FALSE(b > layout.offset(c) && b < layout.offset(c) + layout.length(c)) << "chunk " << c;
    covered += layout.length(c);
  }
  EXPECT_EQ(covered, n);
  size_t want = 0;
  for (size_t s : sizes) want += (s + 2047) / 2048;
  EXPECT_EQ(layout.count, want) << "each blob on its own, in chunks of at most 2048";
  EXPECT_EQ(ChunkLayout(n, 2048).count, (n + 2047) / 2048) << "without boundaries: uniform";
  EXPECT_THROW(ChunkLayout(100, 10, {50, 20}), Error) << "descending";
  EXPECT_THROW(ChunkLayout(100, 10, {101}), Error) << "past the end";
}

TEST(SegmentLayoutTest, TheRuleSyncsOverAnUnevenLayout) {
  std::mt19937 gen(TestSeed());
  const size_t n = 1000;
  const ChunkLayout layout(n, 64, {3, 10, 500, 501});
  std::vector<float> master = RandomVector(n, gen), slave = master, want = master;
  InprocOptions o;
  o.max_payload = kWireHeaderBytes + 64 * sizeof(float);
  o.slots = 8;
  auto [a, b] = InprocDevice::MakePair(o);
  MasterEndpoint me(master.data(), layout, a.get(), Dest::Peer(1));
  SlaveEndpoint se(slave.data(), layout, b.get());
  std::uniform_real_distribution<float> step(-1, 1);
  for (size_t i = 0; i < n; ++i) {  // progress on both sides, then every chunk once
    const float dm = step(gen), ds = step(gen);
    master[i] += dm;
    slave[i] += ds;
    want[i] += dm + ds;
  }
  for (uint32_t sent = 0; sent < layout.count;) {
    sent += static_cast<uint32_t>(me.PostPositions(4));
    se.PollPositions();
    me.PollDeltas();
  }
  EXPECT_EQ(me.stats().malformed + se.stats().malformed, 0u);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_NEAR(master[i], want[i], 1e-5) << i;
    ASSERT_NEAR(slave[i], want[i], 1e-5) << i;
  }
}

// The codec hook with error feedback: master and slave both make progress while chunks go
// encoded both ways; after a few rounds with no more progress the master holds the initial
// weights plus every increment (the slave's quantisation residual stayed in w - last and went
// out later: nothing is lost to the codec), and the slave is within one position's encoding
// error of it. int8 moves about a quarter of float32's bytes.
class SegmentCodecTest : public testing::TestWithParam<const char*> {};

TEST_P(SegmentCodecTest, LosesNothingToQuantisation) {
  std::mt19937 gen(TestSeed());
  const Codec codec = Codec::Parse(GetParam());
  const size_t n = 3000;
  const uint32_t chunk = 256;
  std::vector<float> master = RandomVector(n, gen), slave = master;
  Ledger ledger(master);
  InprocOptions o;
  o.max_payload = kWireHeaderBytes + chunk * sizeof(float);
  o.slots = 8;
  auto [a, b] = InprocDevice::MakePair(o);
  MasterEndpoint me(master.data(), n, chunk, a.get(), Dest::Peer(1));
  SlaveEndpoint se(slave.data(), n, chunk, b.get());
  SegmentRule rule;
  rule.codec = codec;
  me.set_rule(rule);
  se.set_codec(codec);
  const uint32_t chunks = me.layout().count;
  auto sweep = [&] {
    for (uint32_t sent = 0; sent < chunks;) {
      sent += static_cast<uint32_t>(me.PostPositions(4));
      se.PollPositions();
      me.PollDeltas();
    }
  };
  for (int round = 0; round < 10; ++round) {
    for (int k = 0; k < 20; ++k) Bump(slave, gen, {&ledger});
    for (int k = 0; k < 5; ++k) Bump(master, gen, {&ledger});
    sweep();
  }
  const uint64_t bytes_busy = me.stats().bytes_sent + se.stats().bytes_sent;
  for (int round = 0; round < 60; ++round) sweep();  // top-k sends 13 of 256 per chunk and round
  EXPECT_EQ(me.stats().malformed + se.stats().malformed, 0u);
  ExpectNear(master, ledger.total, "master");
  const float slave_tol = codec.position == Encoding::kInt8 ? 0.03f : codec.position == Encoding::kFloat16 ? 3e-3f : kTol;
  for (size_t i = 0; i < n; ++i) ASSERT_NEAR(slave[i], ledger.total[i], slave_tol) << i;
  const double share = static_cast<double>(bytes_busy) / (10.0 * chunks * 2 * chunk * sizeof(float));
  const double most = codec.delta == Encoding::kInt8 ? 0.30 : codec.delta == Encoding::kFloat16 ? 0.51 : 0.6;
  EXPECT_LE(share, most) << "bytes moved vs float32 both ways";
}

INSTANTIATE_TEST_SUITE_P(Codecs, SegmentCodecTest, testing::Values("fp16", "int8", "topk:0.05"));

// A slave that speaks another encoding than the master is counted malformed, never applied.
TEST(SegmentCodecTest2, AnotherEncodingIsMalformed) {
  std::mt19937 gen(TestSeed());
  std::vector<float> w = RandomVector(8, gen);
  const std::vector<float> w0 = w;
  ScriptedTransport t(4 * sizeof(float));
  MasterEndpoint me(w.data(), w.size(), 4, &t, Dest::Peer(1));
  SegmentRule rule;
  rule.codec = Codec::Parse("fp16");
  me.set_rule(rule);
  me.set_epoch(1);
  ASSERT_EQ(me.PostPositions(1), 1u);
  EXPECT_EQ(t.sent[0].h.encoding, Encoding::kFloat16);
  EXPECT_EQ(t.sent[0].h.length, 8u);
  t.Deliver(Delta(0, 1, 1), 2, RandomVector(4, gen));  // float32
  EXPECT_EQ(me.PollDeltas(), 0u);
  EXPECT_EQ(me.stats().malformed, 1u);
  EXPECT_EQ(w, w0);
}

// Two masters of one buffer (two slaves' links) share the chunk's update count. Staleness =
// the deltas of others applied since the sender's previous one + 1; with --staleness-weight
// each delta counts 1 / staleness. Hand-computed, in exact binary fractions.
TEST(SegmentRuleTest, StalenessWeightsEachDeltaByTheUpdatesSinceItsSendersLast) {
  std::vector<float> w(4, 0.f);
  ScriptedTransport ta(4 * sizeof(float)), tb(4 * sizeof(float));
  MasterEndpoint a(w.data(), 4, 4, &ta, Dest::Peer(1)), b(w.data(), 4, 4, &tb, Dest::Peer(2));
  SegmentRule rule;
  rule.aggregate = MakeAggregate("staleness", AggregateSetting{});
  rule.updates = std::make_shared<ChunkUpdates>(1);
  a.set_rule(rule);
  b.set_rule(rule);
  a.set_epoch(1);
  b.set_epoch(1);
  auto deliver = [&](MasterEndpoint& m, ScriptedTransport& t, PeerId from, float v) {
    ASSERT_EQ(m.PostPositions(1), 1u);
    t.Deliver(Delta(0, t.sent.back().h.seq, 1), from, std::vector<float>(4, v));
    ASSERT_EQ(m.PollDeltas(), 1u);
  };
  deliver(a, ta, 1, 1);   // a's first: staleness 1, +1          -> 1
  deliver(b, tb, 2, 2);   // b's first: staleness 1, +2          -> 3
  deliver(a, ta, 1, 4);   // b updated since a's last: 2, +4/2   -> 5
  deliver(a, ta, 1, 8);   // nobody since: 1, +8                 -> 13
  deliver(b, tb, 2, 16);  // a twice since b's last: 3, +16/3
  EXPECT_FLOAT_EQ(w[0], 13.f + 16.f / 3);
  EXPECT_EQ(w[0], w[3]);
  EXPECT_EQ(a.stats().weight_milli, 1000u + 500u + 1000u);
  EXPECT_EQ(b.stats().weight_milli, 1000u + 333u);
  EXPECT_EQ(rule.updates->get(0), 5u);
}

// Three slaves' links into one 4-float master chunk, each on its own scripted transport, under
// one rule: Deliver(i, v) posts positions to link i, answers with a delta of v's, and returns
// how many deltas the master took.
struct ThreeMasterLinks {
  std::vector<float> w = std::vector<float>(4, 0.f);
  ScriptedTransport t[3] = {ScriptedTransport(16), ScriptedTransport(16), ScriptedTransport(16)};
  std::vector<std::unique_ptr<MasterEndpoint>> m;
  explicit ThreeMasterLinks(const SegmentRule& rule) {
    for (int i = 0; i < 3; ++i) {
      m.push_back(std::make_unique<MasterEndpoint>(w.data(), 4, 4, &t[i], Dest::Peer(static_cast<PeerId>(i + 1))));
      m[i]->set_rule(rule);
      m[i]->set_epoch(1);
    }
  }
  size_t Deliver(int i, float v) {
    EXPECT_EQ(m[i]->PostPositions(1), 1u);
    t[i].Deliver(Delta(0, t[i].sent.back().h.seq, 1), static_cast<PeerId>(i + 1), std::vector<float>(4, v));
    return m[i]->PollDeltas();
  }
};

// With the staleness weights' scale 2 (private copies in one process), a delta weighs min(1, 2 / staleness):
// whole up to staleness 2, then 2/3, 2/4... Three links, hand-computed in exact fractions.
TEST(SegmentRuleTest, AScaledStalenessWeightIsTwoOverStalenessAtMostOne) {
  SegmentRule rule;
  rule.aggregate = MakeAggregate("staleness,scale=2", AggregateSetting{});
  rule.updates = std::make_shared<ChunkUpdates>(1);
  ThreeMasterLinks links(rule);
  auto deliver = [&](int i, float v) { ASSERT_EQ(links.Deliver(i, v), 1u); };
  deliver(0, 3);  // first: 1 -> weight 1, +3                  -> 3
  deliver(1, 3);  // first: 1 -> 1, +3                         -> 6
  deliver(2, 3);  // first: 1 -> 1, +3                         -> 9
  deliver(0, 3);  // two others since: 3 -> 2/3, +2            -> 11
  deliver(1, 4);  // two others since (2's, 0's): 3 -> 2/3, +8/3
  EXPECT_FLOAT_EQ(links.w[0], 11.f + 8.f / 3);
  deliver(1, 5);  // nobody since: 1 -> 1, +5
  EXPECT_FLOAT_EQ(links.w[0], 16.f + 8.f / 3);
}

// gsp across machines: senders 1 and 2 are one group (class 0), sender 3 its own. A delta's
// staleness counts the updates since its GROUP's last one, so a group mate's delta is not
// stale to it, while the other group's is. Hand-computed, in exact binary fractions.
TEST(SegmentRuleTest, StalenessCountsFromTheSendersGroupsLastDelta) {
  SegmentRule rule;
  rule.aggregate = MakeAggregate("staleness", AggregateSetting{});
  // peer 0 is the master's own machine; 1 and 2 one group; 3 (past the list's end) a class of its own
  rule.updates = std::make_shared<ChunkUpdates>(1, std::vector<int>{-1, 0, 0});
  ThreeMasterLinks links(rule);
  auto& w = links.w;
  auto& m = links.m;
  auto deliver = [&](int i, float v) { ASSERT_EQ(links.Deliver(i, v), 1u); };
  deliver(0, 1);   // group's first: 1, +1                            -> 1
  deliver(1, 2);   // the group's last is 1's: nobody since: 1, +2    -> 3
  deliver(0, 4);   // since the group's last (its mate's): 1, +4      -> 7
  deliver(2, 8);   // sender 3's first: 1, +8                         -> 15
  deliver(1, 16);  // since the group's last: 3's -> 2, +16/2         -> 23
  deliver(2, 32);  // since 3's last: the group's one -> 2, +32/2     -> 39
  EXPECT_EQ(w[0], 39.f);
  EXPECT_EQ(w[0], w[3]);
  EXPECT_EQ(m[0]->stats().weight_milli + m[1]->stats().weight_milli, 1000u + 1000u + 1000u + 500u);
  EXPECT_EQ(m[2]->stats().weight_milli, 1000u + 500u);
}

// weedout:2 with three slaves' links: a delta whose sender's previous report on that chunk is
// not among the chunk's last 2 is dropped and counted; its sender's next one counts again.
TEST(SegmentRuleTest, WeedOutDropsADeltaWhoseSendersLastReportIsTooFarBack) {
  SegmentRule rule;
  rule.weedout = 2;
  rule.updates = std::make_shared<ChunkUpdates>(1);
  ThreeMasterLinks links(rule);
  auto& w = links.w;
  auto& m = links.m;
  auto deliver = [&](int i, float v) { return links.Deliver(i, v); };
  EXPECT_EQ(deliver(0, 1), 1u);    // first reports: staleness 1
  EXPECT_EQ(deliver(1, 2), 1u);
  EXPECT_EQ(deliver(2, 4), 1u);
  EXPECT_EQ(deliver(1, 8), 1u);    // since 1's last: 2's -> staleness 2, kept
  EXPECT_EQ(deliver(2, 16), 1u);   // since 2's last: 1's -> 2, kept
  EXPECT_EQ(deliver(0, 32), 0u);   // since 0's last: four -> 5 > 2, weeded
  EXPECT_EQ(deliver(0, 64), 1u);   // right after its weeded report: 1, kept
  EXPECT_EQ(w[0], 1.f + 2 + 4 + 8 + 16 + 64);
  EXPECT_EQ(m[0]->stats().deltas_weeded, 1u);
  EXPECT_EQ(m[0]->stats().deltas_applied, 2u);
}

TEST(SegmentSettingsTest, RejectsBadSettingsAndSweepWhileRunning) {
  std::vector<float> a(10), b(10);
  SegmentOptions bad;
  bad.chunk_floats = 0;
  EXPECT_THROW(Segment(a.data(), b.data(), 10, bad), Error);
  EXPECT_THROW(Segment(a.data(), b.data(), 0), Error);
  Segment seg(a.data(), b.data(), 10);
  seg.Start();
  EXPECT_THROW(seg.Sweep(), Bug);
  seg.Stop();
  seg.Sweep();
  EXPECT_EQ(seg.stats().sweeps >= 1, true);
}

}  // namespace
}  // namespace hogstream

namespace hogstream {
namespace HS_UNITY_ID {

// Values are checked where they enter: a master refuses a delta with a non-finite element, and
// one whose RMS is far beyond the chunk's recent deltas (SegmentRule::absurd, once 8 were
// seen); each refusal is counted, reported with its sender, and leaves the weights untouched,
// while ordinary deltas go on being applied. Fresh random deltas, not zeros.
TEST(SegmentValuesTest, MasterRefusesNonFiniteAndAbsurdDeltas) {
  std::mt19937 gen(TestSeed());
  std::vector<float> w = RandomVector(4, gen);
  ScriptedTransport t(4 * sizeof(float));
  MasterEndpoint me(w.data(), 4, 4, &t, Dest::Peer(1));
  me.set_epoch(1);
  std::vector<std::pair<PeerId, Refusal>> refused;
  me.set_on_refused([&](PeerId from, uint32_t c, Refusal why) {
    EXPECT_EQ(c, 0u);
    refused.push_back({from, why});
  });
  auto deliver = [&](PeerId from, const std::vector<float>& d) {
    EXPECT_EQ(me.PostPositions(1), 1u);
    t.Deliver(Delta(0, t.sent.back().h.seq, 1), from, d);
    return me.PollDeltas();
  };
  std::vector<double> want(w.begin(), w.end());
  for (int k = 0; k < 10; ++k) {  // the chunk's scale: RMS about 1
    const std::vector<float> d = RandomVector(4, gen);
    ASSERT_EQ(deliver(1, d), 1u);
    for (size_t i = 0; i < 4; ++i) want[i] += d[i];
  }
  std::vector<float> bad = RandomVector(4, gen);
  bad[2] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(deliver(2, bad), 0u);
  bad[2] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(deliver(2, bad), 0u);
  std::vector<float> huge = RandomVector(4, gen);
  for (float& x : huge) x *= 1e4f;
  EXPECT_EQ(deliver(3, huge), 0u) << "10^4 times the chunk's recent RMS";
  std::vector<float> larger = RandomVector(4, gen);
  for (float& x : larger) x *= 5.f;
  EXPECT_EQ(deliver(3, larger), 1u) << "5 times is a delta, not an attack";
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(w[i], want[i] + larger[i], 1e-4) << i;
  const auto st = me.stats();
  EXPECT_EQ(st.refused_nonfinite, 2u);
  EXPECT_EQ(st.refused_absurd, 1u);
  EXPECT_EQ(st.deltas_applied, 11u);
  ASSERT_EQ(refused.size(), 3u);
  EXPECT_EQ(refused[0].first, 2u);
  EXPECT_EQ(refused[0].second, Refusal::kNonFinite);
  EXPECT_EQ(refused[2].first, 3u);
  EXPECT_EQ(refused[2].second, Refusal::kAbsurd);
  // And per sender, for each machine's figures: what it had applied and refused, and the
  // staleness of what was applied (every delta here answers the latest position: age 0).
  std::map<PeerId, MasterEndpoint::SourceStats> from;
  for (const auto& [p, f] : me.source_stats()) from[p] = f;
  ASSERT_EQ(from.size(), 3u);
  const std::pair<uint64_t, uint64_t> want_applied_refused[] = {{10, 0}, {0, 2}, {1, 1}};
  for (PeerId p = 1; p <= 3; ++p) {
    EXPECT_EQ(from[p].applied, want_applied_refused[p - 1].first) << "sender " << p;
    EXPECT_EQ(from[p].refused, want_applied_refused[p - 1].second) << "sender " << p;
    EXPECT_EQ(from[p].staleness[0], from[p].applied) << "sender " << p;
    EXPECT_EQ(from[p].staleness_sum, 0u);
  }
}

// A forged non-finite delta that answers a position before the real slave does (an attacker who
// spoofs the slave's address and copies the run's numbering) is refused and leaves the seq
// unmarked: the real answer that follows is applied, and only a second copy of it is a duplicate.
TEST(SegmentValuesTest, ARefusedDeltaDoesNotMakeTheRealAnswerADuplicate) {
  std::mt19937 gen(TestSeed());
  std::vector<float> w = RandomVector(4, gen);
  const std::vector<float> w0 = w;
  ScriptedTransport t(4 * sizeof(float));
  MasterEndpoint me(w.data(), 4, 4, &t, Dest::Peer(1));
  me.set_epoch(1);
  ASSERT_EQ(me.PostPositions(1), 1u);
  const uint64_t seq = t.sent.back().h.seq;
  std::vector<float> forged = RandomVector(4, gen);
  forged[1] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> real = RandomVector(4, gen);
  t.Deliver(Delta(0, seq, 1), 1, forged);
  t.Deliver(Delta(0, seq, 1), 1, real);
  t.Deliver(Delta(0, seq, 1), 1, real);
  EXPECT_EQ(me.PollDeltas(), 1u) << "the real delta, after the forged one was refused";
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(w[i], w0[i] + real[i], 1e-6) << i;
  const auto st = me.stats();
  EXPECT_EQ(st.refused_nonfinite, 1u);
  EXPECT_EQ(st.deltas_applied, 1u);
  EXPECT_EQ(st.deltas_duplicate, 1u);
}

// A delta far beyond the chunk's recent ones but within its weights' scale (a machine whose
// link stalled sends many steps at once) is applied; one beyond both is refused.
TEST(SegmentValuesTest, ALongDeltaWithinTheWeightsScaleIsNotAbsurd) {
  std::mt19937 gen(TestSeed());
  // Random directions at exact RMS: four normal draws alone can have an RMS ten times below
  // another's, which moved the verdicts below (a seed in about a thousand).
  auto at_rms = [&](float rms) {
    std::vector<float> v = RandomVector(4, gen);
    float ss = 0;
    for (float x : v) ss += x * x;
    const float k = rms / std::sqrt(std::max(ss / 4, 1e-12f));
    for (float& x : v) x *= k;
    return v;
  };
  std::vector<float> w = at_rms(100);  // weights of RMS 100
  ScriptedTransport t(4 * sizeof(float));
  MasterEndpoint me(w.data(), 4, 4, &t, Dest::Peer(1));
  me.set_epoch(1);
  auto deliver = [&](const std::vector<float>& d) {
    EXPECT_EQ(me.PostPositions(1), 1u);
    t.Deliver(Delta(0, t.sent.back().h.seq, 1), 1, d);
    return me.PollDeltas();
  };
  for (int k = 0; k < 10; ++k) ASSERT_EQ(deliver(at_rms(0.01f)), 1u);  // recent deltas of RMS 0.01
  // 500 times the recent deltas (beyond the default bound of 100 times), 1/20 of the weights.
  EXPECT_EQ(deliver(at_rms(5)), 1u) << "a long delta within the weights' scale was refused";
  EXPECT_EQ(deliver(at_rms(1e5f)), 0u) << "1 000 times the weights (beyond 100 times either scale)";
  EXPECT_EQ(me.stats().refused_absurd, 1u);
}

// A slave refuses a position with a non-finite element (its copy keeps its values and sends
// nothing back), and after RetakeAll takes each chunk's next position whole: w = pos, its own
// unsent progress dropped, and a zero delta sent.
TEST(SegmentValuesTest, SlaveRefusesNonFinitePositionsAndRetakesAChunkWhole) {
  std::mt19937 gen(TestSeed());
  std::vector<float> w = RandomVector(8, gen);
  ScriptedTransport t(4 * sizeof(float));
  SlaveEndpoint se(w.data(), w.size(), 4, &t);
  int refused = 0;
  se.set_on_refused([&](PeerId from, uint32_t, Refusal why) {
    EXPECT_EQ(from, 5u);
    EXPECT_EQ(why, Refusal::kNonFinite);
    ++refused;
  });
  Header p;
  p.kind = MsgKind::kPosition;
  p.epoch = 1;
  std::vector<float> pos = RandomVector(4, gen);
  pos[1] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> before = w;
  p.chunk = 0;
  p.seq = 1;
  t.Deliver(p, 5, pos);
  EXPECT_EQ(se.PollPositions(), 0u);
  EXPECT_EQ(w, before);
  EXPECT_TRUE(t.sent.empty());
  EXPECT_EQ(se.stats().positions_refused, 1u);
  EXPECT_EQ(refused, 1);
  // The copy is lost: every chunk is re-taken whole.
  for (float& x : w) x = std::numeric_limits<float>::quiet_NaN();
  se.RetakeAll();
  EXPECT_EQ(se.retaking(), 2u);
  EXPECT_EQ(se.chunks_heard(), 0u);
  for (uint32_t c = 0; c < 2; ++c) {
    pos = RandomVector(4, gen);
    p.chunk = c;
    p.seq = 2;
    t.Deliver(p, 5, pos);
    ASSERT_EQ(se.PollPositions(), 1u);
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(w[c * 4 + i], pos[i]);
    ASSERT_FALSE(t.sent.empty());
    for (float d : t.sent.back().payload) EXPECT_EQ(d, 0.f) << "no progress of a lost copy goes out";
  }
  EXPECT_EQ(se.retaking(), 0u);
  EXPECT_EQ(se.chunks_heard(), 2u);
  // After that, the rule as ever: progress made since goes out (0.25, as float arithmetic
  // on this w[0] rounds it).
  const float taken = w[0];
  w[0] += 0.25f;
  const float progress = w[0] - taken;
  p.chunk = 0;
  p.seq = 3;
  t.Deliver(p, 5, RandomVector(4, gen));
  ASSERT_EQ(se.PollPositions(), 1u);
  EXPECT_FLOAT_EQ(t.sent.back().payload[0], progress);
  EXPECT_NEAR(t.sent.back().payload[0], 0.25f, 1e-6f);
}

// A master endpoint under a SegmentRule, fed one delta at a time: Deliver(clock, base, v, k)
// sets the master's clock, takes a delta of v whose progress started at clock `base`, and
// checks that the weights moved by exactly k * v.
class RuleMaster {
 public:
  explicit RuleMaster(const SegmentRule& rule) : t_(4 * sizeof(float)), me_(w_.data(), 4, 4, &t_, Dest::Peer(1)) {
    me_.set_rule(rule);
    me_.set_epoch(1);
  }
  void Deliver(uint64_t clock, uint64_t base, float v, float k) {
    me_.set_clock(clock);
    ASSERT_EQ(me_.PostPositions(1), 1u);
    Header h = Delta(0, t_.sent.back().h.seq, 1);
    h.clock = base;
    t_.Deliver(h, 1, std::vector<float>(4, v));
    ASSERT_EQ(me_.PollDeltas(), 1u);
    expect_ += k * v;
    EXPECT_FLOAT_EQ(w_[0], expect_) << "clock " << clock << ", base " << base;
  }

 private:
  std::vector<float> w_ = std::vector<float>(4, 0.f);
  ScriptedTransport t_;
  MasterEndpoint me_;
  float expect_ = 0;
};

// The ramp and the age damping of the rules' envelope (sync/aggregate.hpp) through a master, hand-computed: at clock 0 a delta counts
// warmup_from, half-way up the ramp halfway between, past it whole; a delta older than the
// budget counts budget / age.
TEST(SegmentRuleTest, RampAndAgeDampTheWeight) {
  SegmentRule rule;
  rule.aggregate = MakeAggregate("sum,from=0.25,warmup=100,budget=10", AggregateSetting{});
  RuleMaster m(rule);
  m.Deliver(0, 0, 1.f, 0.25f);
  m.Deliver(50, 45, 2.f, 0.625f);
  m.Deliver(200, 195, 4.f, 1.f);
  m.Deliver(200, 160, 8.f, 0.25f);  // 40 old, budget 10
  m.Deliver(300, 300, 16.f, 1.f);
}

// The cool-down of the rules' envelope through a master, hand-computed: whole before cool=, to=
// past cooled=, linearly between; with the ramp and the age damping multiplied in.
TEST(SegmentRuleTest, CoolDownLowersTheWeightAfterItsStart) {
  SegmentRule rule;
  rule.aggregate = MakeAggregate("sum,from=0.5,warmup=100,cool=200,cooled=400,to=0.2,budget=10", AggregateSetting{});
  RuleMaster m(rule);
  m.Deliver(50, 50, 1.f, 0.75f);          // on the ramp
  m.Deliver(200, 200, 2.f, 1.f);          // the cool-down's start
  m.Deliver(300, 295, 4.f, 0.6f);         // half-way down: 1 - 0.8 / 2
  m.Deliver(350, 330, 8.f, 0.4f * 0.5f);  // 3/4 down (0.4), 20 old with a budget of 10
  m.Deliver(1000, 1000, 16.f, 0.2f);      // past it
}

}  // namespace
}  // namespace hogstream
