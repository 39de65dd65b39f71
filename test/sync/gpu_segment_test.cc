// Tests of sync/gpu_segment on the CPU fake of a GPU runtime (test/core/fake_device.hpp): the
// rule's kernel is the CPU segment's rule, bit for bit; the ledger is exact (master and device
// copy = initial + every increment on either side) under delayed and stalled streams, with a
// stand-in GPU solver's kernels landing between the segment's on their own stream (the race
// the fake found, a `last` taken after the solver's first steps, is gone); the daemon never
// waits for the device; the bandwidth cap holds; and with kernels running concurrently (Hogwild on the device) the copies
// still agree but for the writes such races lose. Every wait has a deadline.
#include "sync/gpu_segment.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "sync/segment.hpp"
#include "test/core/fake_device.hpp"
#include "test/test_seed.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

using namespace std::chrono_literals;
using test::FakeDevice;
using test::FakeDeviceOptions;

// Small integers as floats: every sum below is exact, so the ledger can be checked with ==.
std::vector<float> Ints(size_t n, std::mt19937& gen) {
  std::uniform_int_distribution<int> v(-50, 50);
  std::vector<float> x(n);
  for (float& f : x) f = static_cast<float>(v(gen));
  return x;
}

// Device memory the test owns: uploads (blocking, from pageable memory, as cudaMemcpy) and reads.
struct DeviceBuffer {
  DeviceBuffer(FakeDevice& dev, size_t n) : dev(dev), n(n), p(static_cast<float*>(dev.Alloc(n * sizeof(float)))) {
    s = dev.CreateStream();
  }
  ~DeviceBuffer() {
    dev.DestroyStream(s);
    dev.Free(p);
  }
  std::vector<float> Read() {
    std::vector<float> out(n);
    dev.CopyAsync(out.data(), p, n * sizeof(float), CopyKind::kDeviceToHost, s);  // pageable: blocking
    return out;
  }
  FakeDevice& dev;
  size_t n;
  float* p;
  StreamId s;
};

// Polls `done` every millisecond until it holds or `seconds` pass; returns whether it held.
template <class F>
bool WaitFor(F&& done, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

size_t Differing(const std::vector<float>& got, const std::vector<double>& want) {
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) bad += got[i] != want[i];
  return bad;
}

// The kernel's step (core/slave_rule.hpp), run by the fake's kernel, is the CPU segment's rule
// (sync/segment.cpp, what SlaveEndpoint runs), bit for bit, on fresh random floats.
TEST(GpuSlaveRuleTest, TheKernelIsTheCpuSegmentsRuleBitForBit) {
  std::mt19937 gen(TestSeed());
  std::normal_distribution<float> v(0.f, 3.f);
  const size_t n = 4099;
  std::vector<float> w(n), last(n), pos(n);
  for (size_t i = 0; i < n; ++i) {
    w[i] = v(gen);
    last[i] = w[i] + 0.01f * v(gen);
    pos[i] = last[i] + 0.1f * v(gen);
  }
  std::vector<float> cw = w, clast = last, cdelta(n);
  SlaveRule(cw.data(), clast.data(), pos.data(), cdelta.data(), n);

  FakeDevice dev;
  DeviceBuffer dw(dev, n), dlast(dev, n), dpos(dev, n), ddelta(dev, n);
  dev.CopyAsync(dw.p, w.data(), n * sizeof(float), CopyKind::kHostToDevice, dw.s);
  dev.CopyAsync(dlast.p, last.data(), n * sizeof(float), CopyKind::kHostToDevice, dw.s);
  dev.CopyAsync(dpos.p, pos.data(), n * sizeof(float), CopyKind::kHostToDevice, dw.s);
  dev.LaunchSlaveRule(n, dpos.p, dw.p, dlast.p, ddelta.p, dw.s);
  dev.Synchronize(dw.s);
  const std::vector<float> gw = dw.Read(), glast = dlast.Read(), gdelta = ddelta.Read();
  EXPECT_EQ(std::memcmp(gw.data(), cw.data(), n * sizeof(float)), 0) << "w";
  EXPECT_EQ(std::memcmp(glast.data(), clast.data(), n * sizeof(float)), 0) << "last";
  EXPECT_EQ(std::memcmp(gdelta.data(), cdelta.data(), n * sizeof(float)), 0) << "delta";
  EXPECT_TRUE(dev.errors().empty()) << dev.errors()[0];
}

class GpuSegmentLedger : public testing::TestWithParam<uint32_t> {};  // the fake's max delay, µs

// The segment fills the device copy; then a stand-in GPU solver adds ±1 at random elements of
// it in kernels on its own stream, and a host solver does the same to the master, while the
// test thread drives the segment's state machine between them. Once, the leader's test runs
// on the master's values (RunOnMaster) and must leave the solver's copy as it was. (When the solver uploaded its
// copy itself and the segment took `last` from it on its own stream, the solver's first steps
// could land before `last` was taken: 16-48 elements off, a whole step each, under 300 µs
// delays. Hence the segment's own upload of both from one snapshot.) Midway the segment's stream stalls for 40 turns: no Step takes
// long, and nothing completes beyond the slots already in flight. After two sweeps both copies
// equal the ledger exactly, and the segment made no blocking copy.
TEST_P(GpuSegmentLedger, IsExactUnderDelayedAndStalledStreams) {
  const uint32_t seed = TestSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937 gen(seed);
  FakeDeviceOptions o;
  o.seed = seed;
  o.max_delay = std::chrono::microseconds(GetParam());
  FakeDevice dev(o);
  const size_t n = 10007;
  const std::vector<float> init = Ints(n, gen);
  std::vector<float> master = init;
  std::vector<double> ledger(init.begin(), init.end());
  DeviceBuffer w(dev, n);  // the segment fills it
  GpuSegmentOptions so;
  so.chunk_floats = 1000;
  so.slots = 3;
  {
    GpuSegment seg(dev, master.data(), w.p, n, so);
    std::uniform_int_distribution<size_t> at(0, n - 1);
    double slowest_step = 0;
    uint64_t done_at_stall = 0;
    std::atomic<int> test_saw{-1};  // elements of the device copy that were not the master's in the test
    for (int turn = 0; turn < 400; ++turn) {
      std::vector<std::pair<size_t, float>> add;  // the device solver's step
      for (int k = 0; k < 16; ++k) add.emplace_back(at(gen), (gen() & 1) ? 1.f : -1.f);
      for (const auto& [j, d] : add) ledger[j] += d;
      dev.Launch(w.s, "solver", [p = w.p, add] {
        for (const auto& [j, d] : add) p[j] += d;
      });
      for (int k = 0; k < 16; ++k) {  // the host solver's
        const size_t j = at(gen);
        const float d = (gen() & 1) ? 1.f : -1.f;
        master[j] += d;
        ledger[j] += d;
      }
      if (turn == 150) {
        dev.Stall(seg.stream());
        done_at_stall = seg.stats().chunks;
      }
      const auto t0 = std::chrono::steady_clock::now();
      seg.Step();
      slowest_step = std::max(slowest_step, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      if (turn == 189) {
        EXPECT_LE(seg.stats().chunks, done_at_stall + so.slots) << "chunks completed on a stalled stream";
        dev.Release(seg.stream());
      }
      if (turn == 300) {  // the leader's test: a kernel of the solver's reads the master's values
        seg.RunOnMaster(w.s, [&] {
          // (the chunks in flight have landed: the master is what the copy now holds)
          auto expect = std::make_shared<std::vector<float>>(master);
          dev.Launch(w.s, "test", [p = w.p, expect, &test_saw] {
            int bad = 0;
            for (size_t i = 0; i < expect->size(); ++i) bad += p[i] != (*expect)[i];
            test_saw.store(bad);
          });
        });
      }
      std::this_thread::sleep_for(200us);  // the solvers' pace: the streams run meanwhile
    }
    EXPECT_LT(slowest_step, 0.05) << "a Step waited for the device";
    EXPECT_EQ(test_saw.load(), 0) << "the test kernel did not see the master's values";
    EXPECT_GT(seg.stats().chunks, 40u) << "the segment moved chunks while the solvers ran";
    dev.Synchronize(w.s);  // the device solver's last steps are in its copy
    seg.Sweep();
    seg.Sweep();
  }
  EXPECT_EQ(Differing(master, ledger), 0u) << "master";
  EXPECT_EQ(Differing(w.Read(), ledger), 0u) << "device copy";
  EXPECT_EQ(dev.blocking_copies(), 1u) << "the segment copied from pageable memory (only the test's read may)";
  const auto errors = dev.errors();
  EXPECT_TRUE(errors.empty()) << errors[0];
}

INSTANTIATE_TEST_SUITE_P(Delays, GpuSegmentLedger, testing::Values(0u, 300u),
                         [](const testing::TestParamInfo<uint32_t>& i) { return "max_delay_us" + std::to_string(i.param); });

// The daemon never waits for the device: with its stream stalled it keeps turning (Step never
// blocks; every slot holds a chunk that cannot complete), and Stop returns at once.
TEST(GpuSegmentTest, TheDaemonNeverWaitsForTheDevice) {
  FakeDevice dev;
  const size_t n = 5000;
  std::mt19937 gen(TestSeed());
  std::vector<float> master = Ints(n, gen);
  DeviceBuffer w(dev, n);
  GpuSegmentOptions so;
  so.chunk_floats = 512;
  GpuSegment seg(dev, master.data(), w.p, n, so);
  dev.Stall(seg.stream());
  seg.Start();
  std::this_thread::sleep_for(100ms);
  const auto t0 = std::chrono::steady_clock::now();
  seg.Stop();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 0.05)
      << "Stop waited: the daemon was blocked on the stalled stream";
  EXPECT_EQ(seg.stats().chunks, 0u) << "nothing completes on a stalled stream";
  dev.Release(seg.stream());
  seg.Sweep();  // the slots' chunks land, then one pass over every chunk
  EXPECT_EQ(seg.stats().chunks, so.slots + seg.chunks());
}

// A wait for sweeps on the device's segment: false at its deadline while the stream is stalled
// (no chunk completes), true once it moves, and told at each sweep (of ten waits of one sweep
// each, most end well within the board's 50 ms recheck).
TEST(GpuSegmentTest, AWaitEndsAtItsSweepsOrAtItsDeadline) {
  using Clock = std::chrono::steady_clock;
  FakeDevice dev;
  const size_t n = 2000;
  std::mt19937 gen(TestSeed());
  std::vector<float> master = Ints(n, gen);
  DeviceBuffer w(dev, n);
  GpuSegmentOptions so;
  so.chunk_floats = 500;
  GpuSegment seg(dev, master.data(), w.p, n, so);
  dev.Stall(seg.stream());
  seg.Start();
  const auto t0 = Clock::now();
  EXPECT_FALSE(seg.AwaitSweeps(1, 200ms)) << "a sweep on a stalled stream";
  EXPECT_GE(Clock::now() - t0, 200ms);
  dev.Release(seg.stream());
  const uint64_t before = seg.stats().sweeps;
  int prompt = 0;  // waits that ended well within the board's 50 ms recheck
  for (int i = 0; i < 10; ++i) {
    const auto t1 = Clock::now();
    ASSERT_TRUE(seg.AwaitSweeps(1, 10s)) << i;
    prompt += Clock::now() - t1 < 25ms;
  }
  EXPECT_GE(prompt, 5) << "the waits were not told of the sweeps (each waited for the board's recheck)";
  EXPECT_GE(seg.stats().sweeps, before + 10);
  seg.Stop();
}

// The bandwidth cap: at 4 MB/s, half a second of the daemon moves about 2 MB (a tenth of a
// second's burst more at most); without it, the fake moves far more.
TEST(GpuSegmentTest, TheBandwidthCapHoldsTheRate) {
  FakeDevice dev;
  const size_t n = 1 << 16;
  std::vector<float> master(n, 1.f);
  DeviceBuffer w(dev, n);
  uint64_t moved[2] = {};
  for (int capped = 0; capped < 2; ++capped) {
    GpuSegmentOptions so;
    so.chunk_floats = 1024;  // 8 KiB a chunk, position and delta
    so.max_bytes_per_s = capped ? 4e6 : 0;
    GpuSegment seg(dev, master.data(), w.p, n, so);
    const auto t0 = std::chrono::steady_clock::now();
    seg.Start();
    std::this_thread::sleep_for(500ms);
    seg.Stop();
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    moved[capped] = seg.stats().bytes;
    if (capped) {
      EXPECT_LE(moved[1], 4e6 * secs + 4e5 + 8192) << "over the cap";
      EXPECT_GE(moved[1], 4e6 * 0.5 * 0.5) << "far under the cap";
      EXPECT_GT(seg.stats().capped, 0u);
    }
  }
  EXPECT_GT(moved[0], 3 * moved[1]) << "uncapped, the fake moves more";
}

// Kernels running concurrently (the device solver's and the segment's rule, as streams may
// run them): a solver write that lands inside the rule's read and write of an element is lost
// (Hogwild), nothing else. The daemon runs throughout; afterwards both copies agree exactly and
// differ from the ledger only at a few elements, by a lost write each.
TEST(GpuSegmentTest, ConcurrentKernelsLoseOnlyRacingWrites) {
  const uint32_t seed = TestSeed();
  std::mt19937 gen(seed);
  FakeDeviceOptions o;
  o.seed = seed;
  o.serial_kernels = false;
  o.max_delay = 100us;
  FakeDevice dev(o);
  const size_t n = 20000;
  const std::vector<float> init = Ints(n, gen);
  std::vector<float> master = init;
  std::vector<double> ledger(init.begin(), init.end());
  DeviceBuffer w(dev, n);
  GpuSegmentOptions so;
  so.chunk_floats = 2048;
  GpuSegment seg(dev, master.data(), w.p, n, so);
  seg.Start();
  std::uniform_int_distribution<size_t> at(0, n - 1);
  for (int step = 0; step < 300; ++step) {
    std::vector<std::pair<size_t, float>> add;
    for (int k = 0; k < 16; ++k) add.emplace_back(at(gen), 1.f);
    for (const auto& [j, d] : add) ledger[j] += d;
    dev.Launch(w.s, "solver", [p = w.p, add] {
      for (const auto& [j, d] : add) p[j] += d;
    });
    std::this_thread::sleep_for(200us);
  }
  dev.Synchronize(w.s);
  seg.Stop();
  seg.Sweep();
  seg.Sweep();
  const std::vector<float> device = w.Read();
  EXPECT_EQ(Differing(device, std::vector<double>(master.begin(), master.end())), 0u) << "the copies agree";
  EXPECT_LE(Differing(master, ledger), 24u) << "more than racing writes were lost";
  EXPECT_GT(seg.stats().sweeps, 3u);
}

class GpuCopiesLedger : public testing::TestWithParam<uint32_t> {};  // the fake's max delay, µs

// gpus.bin's GPU solvers (GpuCopies): two stand-in GPU solvers, each on its own thread and
// stream, add ±1 at random elements of their own device copies in kernels, while ONE daemon
// drives both segments. The second ends first (Finish: its copy's last sweep) while the first
// still trains; the first then runs the leader's test on the master's values (RunOnMaster,
// from its thread, the daemon running) and must find exactly them (once the other copy has
// finished, nothing else writes the master meanwhile). Then the master equals the initial
// values plus both solvers' every step, exactly: one daemon writes the master, so no write of
// it is lost, the test put the first copy back as it was, and nothing a copy made is left on
// the device.
TEST_P(GpuCopiesLedger, TwoDeviceCopiesOneDaemonTheLedgerExact) {
  const uint32_t seed = TestSeed();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937 gen(seed);
  FakeDeviceOptions o;
  o.seed = seed;
  o.max_delay = std::chrono::microseconds(GetParam());
  FakeDevice dev(o);
  const size_t n = 12007;
  const std::vector<float> init = Ints(n, gen);
  std::vector<float> master = init;
  GpuSegmentOptions so;
  so.chunk_floats = 1000;
  so.slots = 3;
  constexpr int kSolvers = 2;
  std::vector<std::vector<double>> steps(kSolvers, std::vector<double>(n, 0.0));  // each solver's sum
  std::atomic<int> tests{0}, tests_wrong{0};
  std::atomic<bool> second_done{false};
  {
    GpuCopies copies(dev, master.data(), n, so);
    for (int k = 0; k < kSolvers; ++k) ASSERT_EQ(copies.Add(), k);
    for (int k = 0; k < kSolvers; ++k) {
      std::vector<float> filled(n);
      dev.CopyAsync(filled.data(), copies.copy(k), n * sizeof(float), CopyKind::kDeviceToHost, copies.segment(k).stream());
      ASSERT_EQ(Differing(filled, std::vector<double>(init.begin(), init.end())), 0u) << "copy " << k << " filled";
    }
    copies.Start();
    auto solver = [&](int k, uint32_t solver_seed, int turns) {
      std::mt19937 g(solver_seed);
      std::uniform_int_distribution<size_t> at(0, n - 1);
      const StreamId s = dev.CurrentStream();
      float* w = copies.copy(k);
      for (int turn = 0; turn < turns; ++turn) {
        std::vector<std::pair<size_t, float>> add;
        for (int j = 0; j < 16; ++j) add.emplace_back(at(g), (g() & 1) ? 1.f : -1.f);
        for (const auto& [j, d] : add) steps[k][j] += d;
        dev.Launch(s, "solver", [w, add] {
          for (const auto& [j, d] : add) w[j] += d;
        });
        if (k == 0 && turn >= 200 && turn % 40 == 0) {
          ASSERT_TRUE(WaitFor([&] { return second_done.load(); }, 20)) << "the second solver never finished";
          copies.RunOnMaster(k, s, [&] {
            auto expect = std::make_shared<std::vector<float>>(master);
            dev.Launch(s, "test", [w, expect, n, &tests, &tests_wrong] {
              size_t bad = 0;
              for (size_t i = 0; i < n; ++i) bad += w[i] != (*expect)[i];
              tests.fetch_add(1);
              tests_wrong.fetch_add(bad != 0);
            });
          });
        }
        std::this_thread::sleep_for(200us);
      }
      dev.Synchronize(s);  // its last steps are in its copy
      copies.Finish(k);
      if (k == 1) second_done.store(true);
    };
    std::thread second(solver, 1, seed + 1, 150);
    solver(0, seed + 2, 320);  // the second ends first: this one's segment runs on alone
    second.join();
    copies.Stop();
    const auto st = copies.stats();
    ASSERT_EQ(st.size(), 2u);
    for (int k = 0; k < kSolvers; ++k) EXPECT_GT(st[k].sweeps, 3u) << "copy " << k << " was streamed";
    EXPECT_EQ(st[0].master_runs, 3u);
  }
  EXPECT_EQ(tests.load(), 3);  // at turns 200, 240 and 280
  EXPECT_EQ(tests_wrong.load(), 0) << "a test saw other values than the master's";
  std::vector<double> ledger(init.begin(), init.end());
  for (const auto& sum : steps)
    for (size_t i = 0; i < n; ++i) ledger[i] += sum[i];
  EXPECT_EQ(Differing(master, ledger), 0u) << "master";
  EXPECT_EQ(dev.device_bytes(), 0u) << "device memory left";
  const auto errors = dev.errors();
  EXPECT_TRUE(errors.empty()) << errors[0];
}

INSTANTIATE_TEST_SUITE_P(Delays, GpuCopiesLedger, testing::Values(0u, 300u),
                         [](const testing::TestParamInfo<uint32_t>& i) { return "max_delay_us" + std::to_string(i.param); });

// The private copies' rule from three copies up, as the CPU master applies it: a delta counts
// in the chunk's update clock shared with the other copies' segments, and is taken times
// min(1, scale / staleness) (the same aggregation rule, sync/aggregate.hpp), its staleness the chunk's updates since this copy's previous
// delta, plus one. Two copies of 8 floats, each +4 in turn; the first's second delta comes
// after one update of the other's: staleness 2, taken at weight 1/2.
TEST(GpuSegmentTest, DeltasAreWeighedByTheirStalenessAsTheCpuMastersAre) {
  for (const float scale : {1.f, 0.f}) {
    SCOPED_TRACE(::testing::Message() << "scale " << scale << " (0: every delta whole)");
    FakeDevice dev;
    const size_t n = 8;
    std::vector<float> master(n, 0.f);
    DeviceBuffer a(dev, n), b(dev, n);
    GpuSegmentOptions so;
    so.chunk_floats = 8;
    so.updates = std::make_shared<ChunkUpdates>(1);
    if (scale > 0) so.aggregate = MakeAggregate("staleness,scale=" + std::to_string(scale), AggregateSetting{});
    GpuSegment sa(dev, master.data(), a.p, n, so), sb(dev, master.data(), b.p, n, so);
    auto step = [&](DeviceBuffer& w) {
      dev.Launch(w.s, "solver", [p = w.p] {
        for (size_t i = 0; i < n; ++i) p[i] += 4.f;
      });
      dev.Synchronize(w.s);
    };
    step(a);
    sa.Sweep();  // staleness 1: whole
    step(b);
    sb.Sweep();  // staleness 1 (its first): whole
    step(a);
    sa.Sweep();  // one update of b's since a's last: staleness 2
    EXPECT_EQ(so.updates->get(0), 3u);
    for (float v : master) ASSERT_EQ(v, scale > 0 ? 10.f : 12.f);
    EXPECT_EQ(sa.stats().weighted, scale > 0 ? 1u : 0u);
    EXPECT_EQ(sb.stats().weighted, 0u);
  }
}

// A rule with per-chunk state takes a GPU copy's deltas as it takes a CPU master's: two copies'
// deltas of +4, a, b, a, through their segments, against the same rule fed the same deltas by
// hand. Outer momentum (lr 1, momentum 0.5, a step every 2 deltas: 4, 8 + 0.5 x 8, 16) and the
// models' average of 3 machines (each delta at 1/3, the owner's own rescaled every 2: 4/3 x 3),
// and Adasum (each +4 repeats the last: the master stays at the first).
TEST(GpuSegmentTest, AStatefulRuleTakesTheCopiesDeltasAsOnTheHost) {
  AggregateSetting three;
  three.machines = 3;
  const struct {
    const char* text;
    float want;
  } rules[] = {{"outer,momentum=0.5,every=2", 16.f}, {"average,every=2", 4.f}, {"adasum", 4.f}};
  for (const auto& r : rules) {
    SCOPED_TRACE(r.text);
    FakeDevice dev;
    const size_t n = 8;
    std::vector<float> master(n, 0.f), host(n, 0.f);
    DeviceBuffer a(dev, n), b(dev, n);
    GpuSegmentOptions so;
    so.chunk_floats = 8;
    so.updates = std::make_shared<ChunkUpdates>(1);
    so.aggregate = MakeAggregate(r.text, three);
    GpuSegment sa(dev, master.data(), a.p, n, so), sb(dev, master.data(), b.p, n, so);
    auto step = [&](DeviceBuffer& w) {
      dev.Launch(w.s, "solver", [p = w.p] {
        for (size_t i = 0; i < n; ++i) p[i] += 4.f;
      });
      dev.Synchronize(w.s);
    };
    auto by_hand = MakeAggregate(r.text, three);
    by_hand->Bind(n, 1);
    const std::vector<float> four(n, 4.f);
    DeviceBuffer* order[] = {&a, &b, &a};
    GpuSegment* segment[] = {&sa, &sb, &sa};
    for (int k = 0; k < 3; ++k) {
      step(*order[k]);
      segment[k]->Sweep();
      by_hand->Take(DeltaInfo{}, host.data(), four.data(), static_cast<uint32_t>(n), Access::kPlain);
    }
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(master[i], host[i]) << i;
      ASSERT_FLOAT_EQ(master[i], r.want) << i;
    }
  }
}

// A copy that went non-finite: its deltas are not taken (counted), so the master stays sound,
// and Retake puts the master's values in the copy and in `last` (nothing sent back), after the
// solver's queued work; the copy then streams as before. A master that is not finite is not
// re-taken.
TEST(GpuSegmentTest, ADivergedCopyIsRefusedAndRetakesTheMaster) {
  FakeDevice dev;
  std::mt19937 gen(TestSeed());
  const size_t n = 3000;
  const std::vector<float> init = Ints(n, gen);
  std::vector<float> master = init;
  DeviceBuffer w(dev, n);
  GpuSegmentOptions so;
  so.chunk_floats = 1000;
  GpuSegment seg(dev, master.data(), w.p, n, so);
  dev.Launch(w.s, "diverge", [p = w.p] {
    p[1500] = std::numeric_limits<float>::quiet_NaN();
    p[10] += 1.f;
  });
  dev.Synchronize(w.s);
  seg.Sweep();
  EXPECT_EQ(seg.stats().refused, 1u) << "the chunk holding the NaN";
  std::vector<double> want(init.begin(), init.end());
  want[10] += 1;  // (a sound chunk's step is taken)
  EXPECT_EQ(Differing(master, want), 0u) << "the master took a non-finite delta";
  EXPECT_TRUE(seg.Retake(w.s));
  EXPECT_EQ(Differing(w.Read(), want), 0u) << "the copy re-took the master";
  dev.Launch(w.s, "step", [p = w.p] { p[2500] -= 2.f; });
  dev.Synchronize(w.s);
  seg.Sweep();
  want[2500] -= 2;
  EXPECT_EQ(Differing(master, want), 0u) << "after the re-take the copy's steps stream as before";
  EXPECT_EQ(seg.stats().retakes, 1u);
  master[7] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(seg.Retake(w.s)) << "a master that is not finite is not re-taken";
  EXPECT_TRUE(dev.errors().empty()) << dev.errors()[0];
}

}  // namespace
}  // namespace hogstream
