// sync/policy: --policy parsing, and each policy's rule checked in-process against a small
// hand-computed reference with stand-in solvers (threads that add known amounts to their
// private copies): bsp and gsp averages, ssp's and max-advance's clock bounds, easgd's elastic
// exchange; a dead solver never hangs the others; a stuck one is named within the deadline.
#include "sync/policy.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <functional>
#include <thread>
#include <vector>

#include "sync/local_segment.hpp"
#include "sync/solver_group.hpp"  // (stand-in solvers write the counters)
#include "test/error_of.hpp"
#include "test/test_seed.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

using namespace std::chrono_literals;

// What NetJob::AwaitNews is to a policy across machines, for counts kept by the test: asks
// `done` every 200 us until it holds or the deadline passes.
bool PollUntil(const std::function<bool()>& done, std::chrono::steady_clock::time_point deadline) {
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(200us);
  }
  return true;
}

TEST(PolicyParse, EveryFormAndItsName) {
  EXPECT_EQ(Policy::Parse("").kind, Policy::Kind::kAsync);
  EXPECT_FALSE(Policy::Parse("async").needs_private());
  EXPECT_TRUE(Policy::Parse("async", true).needs_private()) << "--staleness-weight needs segments";
  EXPECT_TRUE(Policy::Parse("", false, "int8").needs_private()) << "--compress needs segments";
  EXPECT_EQ(Policy::Parse("ssp:3").bound, 3u);
  EXPECT_EQ(Policy::Parse("max-advance:2").name(), "max-advance:2");
  const Policy e = Policy::Parse("easgd:0.25:4");
  EXPECT_EQ(e.alpha, 0.25f);
  EXPECT_EQ(e.period, 4u);
  EXPECT_EQ(Policy::Parse("easgd:0.5").period, 1u);
  const Policy g = Policy::Parse("gsp:0,1;2, 3", false, "fp16");
  ASSERT_EQ(g.groups.size(), 2u);
  EXPECT_EQ(g.groups[1], (std::vector<int>{2, 3}));
  EXPECT_EQ(g.name(), "gsp:0,1;2,3 --compress=fp16");
  EXPECT_EQ(g.Rule(nullptr).aggregate->name(), "staleness") << "gsp weighs groups by 1 / staleness";
  EXPECT_EQ(Policy::Parse("ssp:2").Rule(nullptr).aggregate->name(), "sum");
  EXPECT_EQ(Policy::Parse("ssp:2", true).Rule(nullptr).aggregate->name(), "staleness");
  EXPECT_EQ(Policy::Parse("weedout:5").Rule(nullptr).weedout, 5u);
  const std::string file = ::testing::TempDir() + "/groups_" + std::to_string(TestSeed());
  std::ofstream(file) << "# two groups\n0, 2\n1,3  # the slow pair\n";
  EXPECT_EQ(Policy::Parse("gsp:@" + file).groups, (std::vector<std::vector<int>>{{0, 2}, {1, 3}}));
}

TEST(PolicyParse, MistakesAreOneLine) {
  for (const char* bad : {"bsp:2", "ssp", "ssp:-1", "ssp:x", "max-advance:0", "weedout:", "easgd:0", "easgd:2",
                          "easgd:0.1:0", "gsp:", "gsp:0,a", "gsp:@/nonexistent/groups", "sync", "hogwild"}) {
    const std::string e = ErrorOf([&] { Policy::Parse(bad); });
    EXPECT_NE(e.find(std::string("--policy=") + bad), std::string::npos) << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  const Policy g = Policy::Parse("gsp:0,1;1,2");
  EXPECT_NE(ErrorOf([&] { g.CheckGroups(3); }).find("solver 1 is in two groups"), std::string::npos);
  EXPECT_NE(ErrorOf([&] { Policy::Parse("gsp:0;1").CheckGroups(3); }).find("solver 2 is in no group"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { Policy::Parse("gsp:0,1;5").CheckGroups(3); }).find("solver 5 does not exist"),
            std::string::npos);
}

// Stand-in solvers over one PolicyRun: solver i adds add[i] to every element of its copy each
// iteration, counting it as a solver counts (group done), between Before and After.
struct Bench {
  Bench(const Policy& p, int solvers, int groups, size_t floats, float start)
      : group(std::make_unique<SolverGroup>()),
        shared(group.get(), false),
        copies(solvers, std::vector<float>(floats, start)),
        targets(groups, std::vector<float>(floats, start)),
        live(solvers),
        floats(floats) {
    std::vector<int> ranks;
    std::vector<float*> c, t;
    for (int i = 0; i < solvers; ++i) {
      ranks.push_back(i);
      c.push_back(copies[i].data());
      live[i].store(true);
    }
    for (auto& tg : targets) t.push_back(tg.data());
    run = std::make_unique<PolicyRun>(p, &shared, ranks, c, t, floats, [this](int i) { return live[i].load(); });
  }
  // Solver i runs `iters` iterations (or until Before says stop), then ends.
  std::thread Solver(int i, int iters, float add, std::chrono::milliseconds pace = 0ms) {
    return std::thread([this, i, iters, add, pace] {
      try {
        for (int k = 0; k < iters && run->Before(i); ++k) {
          for (float& x : copies[i]) x += add;
          group->done[i].fetch_add(1);
          std::this_thread::sleep_for(pace);
          run->After(i);
        }
        run->End(i);
      } catch (const std::exception& e) {
        error = e.what();
        group->stop.store(1);
      }
    });
  }
  std::unique_ptr<SolverGroup> group;
  SharedGroup shared;  // the policy's view of it
  std::vector<std::vector<float>> copies, targets;
  std::vector<std::atomic<bool>> live;
  size_t floats;
  std::unique_ptr<PolicyRun> run;
  std::string error;
};

// bsp in one process: every round the master moves by twice the average of the solvers' steps
// (1, 2, 4, 8 here: +7.5 per round), and every copy starts the next iteration from it. Exact
// in binary.
TEST(PolicyRunTest, BspMovesTheMasterByTwiceTheAverageStepEveryRound) {
  Bench b(Policy::Parse("bsp"), 4, 1, 1001, 0.5f);
  std::vector<std::thread> ts;
  for (int i = 0; i < 4; ++i) ts.push_back(b.Solver(i, 20, static_cast<float>(1 << i)));
  for (auto& t : ts) t.join();
  ASSERT_EQ(b.error, "");
  for (size_t x = 0; x < b.floats; ++x) ASSERT_EQ(b.targets[0][x], 0.5f + 20 * 2 * 3.75f) << x;
  for (int i = 0; i < 4; ++i) EXPECT_EQ(b.copies[i], b.targets[0]) << "solver " << i << " holds the master";
  EXPECT_EQ(b.run->figures().rounds, 20u);
}

// A step with a non-finite element (a copy that diverged) is left out of its bsp round: the
// master moves by the others' doubled mean that round, stays finite, and the diverged copy
// starts the next iteration from it like every other.
TEST(PolicyRunTest, BspLeavesANonFiniteStepOutOfItsRound) {
  Bench b(Policy::Parse("bsp"), 4, 1, 1001, 0.5f);
  std::vector<std::thread> ts;
  for (int i = 0; i < 3; ++i) ts.push_back(b.Solver(i, 20, static_cast<float>(1 << i)));
  ts.emplace_back([&b] {
    for (int k = 0; k < 20 && b.run->Before(3); ++k) {
      const float add = k == 5 ? std::numeric_limits<float>::quiet_NaN() : 8.f;
      for (float& x : b.copies[3]) x += add;
      b.group->done[3].fetch_add(1);
      b.run->After(3);
      EXPECT_EQ(b.run->sound(3), k != 5) << k;
    }
    b.run->End(3);
  });
  for (auto& t : ts) t.join();
  ASSERT_EQ(b.error, "");
  const float want = 0.5f + 19 * 2 * 3.75f + 2 * 7.f / 3;  // 19 rounds of four, one of three
  for (size_t x = 0; x < b.floats; ++x) ASSERT_NEAR(b.targets[0][x], want, 1e-4) << x;
  for (int i = 0; i < 4; ++i) EXPECT_EQ(b.copies[i], b.targets[0]) << "solver " << i << " holds the master";
  EXPECT_EQ(b.run->figures().unsound, 1u);
  EXPECT_NE(b.run->Line().find("1 non-finite steps left out"), std::string::npos) << b.run->Line();
}

// A solver that dies under bsp is dropped from the barrier: the others go on at once, and their
// (doubled) average is over those who arrived.
TEST(PolicyRunTest, ADeadSolverIsDroppedFromTheBarrier) {
  Policy p = Policy::Parse("bsp");
  p.timeout = 10s;  // far longer than the test may take
  Bench b(p, 3, 1, 64, 0.f);
  std::vector<std::thread> ts;
  ts.push_back(b.Solver(0, 10, 1.f));
  ts.push_back(b.Solver(1, 10, 2.f));
  ts.push_back(std::thread([&b] {  // three rounds, then it dies without a word
    for (int k = 0; k < 3; ++k) {
      b.run->Before(2);
      for (float& x : b.copies[2]) x += 9.f;
      b.run->After(2);
    }
    b.live[2].store(false);
  }));
  const auto start = std::chrono::steady_clock::now();
  for (auto& t : ts) t.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s) << "the survivors waited for the dead";
  ASSERT_EQ(b.error, "");
  EXPECT_EQ(b.targets[0][7], 3 * 8.f + 7 * 3.f);  // twice (1 + 2 + 9) / 3, then twice (1 + 2) / 2
}

// ssp:1: the fastest runs at most 1 iteration ahead of a solver that never moves, and after
// the deadline the stuck one is named in one line.
TEST(PolicyRunTest, SspHoldsTheFastestAndNamesAStuckSolver) {
  Policy p = Policy::Parse("ssp:1");
  p.timeout = 300ms;
  Bench b(p, 2, 0, 8, 0.f);
  std::thread fast = b.Solver(0, 10, 1.f);
  const auto start = std::chrono::steady_clock::now();
  fast.join();  // solver 1 never runs an iteration
  EXPECT_GE(std::chrono::steady_clock::now() - start, 300ms);
  EXPECT_EQ(b.group->done[0].load(), 2) << "iterations 1 and 2, then 2 ahead of 0: wait";
  EXPECT_NE(b.error.find("--policy=ssp:1: solver 0 waited 0.3 s at iteration 2"), std::string::npos) << b.error;
  EXPECT_EQ(b.error.find('\n'), std::string::npos);
}

// max-advance:3 with a solver paced slowly: the fast one never leads by 3 or more; a solver
// that has finished holds nobody back.
TEST(PolicyRunTest, MaxAdvanceNeverLetsTheFastestLeadByK) {
  Bench b(Policy::Parse("max-advance:3"), 2, 0, 8, 0.f);
  std::atomic<int64_t> worst{0};
  std::atomic<bool> over{false};
  std::thread watch([&] {  // while the slow one has not ended (its count is read second and only grows)
    while (!over.load()) {
      const int64_t fast = b.group->done[0].load(), slow = b.group->done[1].load();
      if (slow < 15) worst.store(std::max(worst.load(), fast - slow));
      std::this_thread::sleep_for(100us);
    }
  });
  std::thread slow = b.Solver(1, 15, 1.f, 5ms), fast = b.Solver(0, 40, 1.f);
  slow.join();
  fast.join();  // after the slow one ended, nothing holds the fast one
  over.store(true);
  watch.join();
  ASSERT_EQ(b.error, "");
  EXPECT_EQ(b.group->done[0].load(), 40);
  EXPECT_LE(worst.load(), 3) << "it passes the gate leading by K - 1, then runs one iteration";
  EXPECT_GT(b.run->figures().waits, 0u);
}

// gsp:0,1;2,3: each group's buffer moves by its own members' average; groups never wait for
// each other (group 1 is paced at 50 ms an iteration and group 0 still finishes first).
TEST(PolicyRunTest, GspAveragesWithinEachGroupOnly) {
  Bench b(Policy::Parse("gsp:0,1;2,3"), 4, 2, 100, 0.f);
  std::vector<std::thread> ts;
  ts.push_back(b.Solver(0, 10, 1.f));
  ts.push_back(b.Solver(1, 10, 3.f));
  ts.push_back(b.Solver(2, 10, 5.f, 50ms));
  ts.push_back(b.Solver(3, 10, 7.f, 50ms));
  ts[0].join();
  ts[1].join();
  const int64_t slow_done = b.group->done[2].load();
  for (size_t k = 2; k < ts.size(); ++k) ts[k].join();
  ASSERT_EQ(b.error, "");
  EXPECT_LT(slow_done, 10) << "group 0 waited for group 1";
  for (size_t x = 0; x < 100; ++x) {
    ASSERT_EQ(b.targets[0][x], 10 * 2.f) << x;
    ASSERT_EQ(b.targets[1][x], 10 * 6.f) << x;
  }
}

// Across machines the bound holds per solver: this machine's two solvers (their mean count,
// as they share one buffer) against the slowest other machine's clock per solver, which comes
// from outside; after each wait, ssp waits for two fresh exchange rounds. The other machine
// here is one solver: while it stands at 30, each of ours may run to 33 (a lead of 2 passes,
// 3 waits), not half of that, as when machines' totals were compared.
TEST(PolicyRunTest, AcrossMachinesTheBoundHoldsPerSolverAgainstTheSlowestMachine) {
  Bench b(Policy::Parse("ssp:2"), 2, 0, 8, 0.f);
  std::atomic<int64_t> other{0}, worst{0};
  std::atomic<uint64_t> fresh{0}, refreshes{0};
  b.run->set_machines([&] { return other.load(); }, [&] {
    refreshes.fetch_add(1);
    return fresh.load();
  }, PollUntil);
  std::atomic<bool> over{false}, stalled{true};
  std::thread remote([&] {  // the other machine: one iteration and one exchange round every ms
    while (!over.load()) {
      const int64_t lead = (b.group->done[0].load() + b.group->done[1].load()) / 2 - other.load();
      worst.store(std::max(worst.load(), lead));
      if (other.load() < (stalled.load() ? 30 : 1000)) other.fetch_add(1);
      fresh.fetch_add(1);
      std::this_thread::sleep_for(1ms);
    }
  });
  std::thread s0 = b.Solver(0, 60, 1.f), s1 = b.Solver(1, 60, 1.f);
  const auto sum = [&] { return b.group->done[0].load() + b.group->done[1].load(); };
  // Held at the other machine's 30: our mean reaches 32 and one more iteration each at most.
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!(other.load() == 30 && sum() >= 65) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(1ms);
  EXPECT_GE(sum(), 65) << "held before the bound: at " << sum() << " with the other machine at " << other.load();
  std::this_thread::sleep_for(100ms);
  EXPECT_LE(sum(), 68) << "each solver ran past the bound";
  stalled.store(false);
  s0.join();
  s1.join();
  over.store(true);
  remote.join();
  ASSERT_EQ(b.error, "");
  EXPECT_EQ(sum(), 120);
  EXPECT_LE(worst.load(), 2 + 1) << "each solver passes at a lead of at most 2, then runs one iteration";
  EXPECT_GT(b.run->figures().waits, 0u) << "the local pair is faster than one iteration a ms";
  EXPECT_GT(refreshes.load(), 0u) << "ssp refreshed after its waits";
}

// bsp across machines, 2 local solvers (steps 1 and 3) and one other machine (step 6, both
// scaled by 1/2, the group's two machines): each round adds (1 + 3) / 2 / 2 = 1 to the host
// copy, the other machine's delta adds 3, and no solver starts iteration k + 1 before the
// other machine's step k is in (its flushed clock) and two fresh rounds have passed; it then
// starts from the host: start + 4 k, exactly.
TEST(PolicyRunTest, AcrossMachinesBspRoundsWaitForTheGroupAndStartFromTheHost) {
  Bench b(Policy::Parse("bsp"), 2, 1, 8, 0.5f);
  std::atomic<int64_t> other{0};
  std::atomic<uint64_t> fresh{0};
  b.run->set_machines([&] { return other.load(); }, [&] { return fresh.load(); }, PollUntil);
  b.run->set_machine_rounds(0.5f, "bsp");
  constexpr int kIters = 40;
  std::atomic<bool> over{false};
  std::thread ticker([&] {  // the network: a fresh round every ms
    while (!over.load()) {
      fresh.fetch_add(1);
      std::this_thread::sleep_for(1ms);
    }
  });
  std::thread remote([&] {  // the other machine's step k, once this machine's round k is in
    for (int k = 1; k <= kIters; ++k) {
      const auto end = std::chrono::steady_clock::now() + 10s;
      while (b.run->figures().rounds < static_cast<uint64_t>(k) && std::chrono::steady_clock::now() < end)
        std::this_thread::sleep_for(100us);
      std::this_thread::sleep_for(2ms);  // late: the local solvers have to wait for it
      for (float& x : b.targets[0]) x += 3;
      other.store(k);  // its step k, per solver
    }
  });
  std::vector<std::vector<float>> seen(2);
  std::vector<std::thread> solvers;
  for (int i = 0; i < 2; ++i)
    solvers.emplace_back([&, i] {
      const float add = i ? 3.f : 1.f;
      for (int k = 0; k < kIters && b.run->Before(i); ++k) {
        seen[i].push_back(b.copies[i][5]);
        for (float& x : b.copies[i]) x += add;
        b.group->done[i].fetch_add(1);
        b.run->After(i);
      }
      b.run->End(i);
    });
  for (auto& t : solvers) t.join();
  remote.join();
  over.store(true);
  ticker.join();
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(seen[i].size(), static_cast<size_t>(kIters));
    for (int k = 0; k < kIters; ++k) ASSERT_EQ(seen[i][k], 0.5f + 4 * k) << "solver " << i << " iteration " << k;
  }
  for (float x : b.targets[0]) EXPECT_EQ(x, 0.5f + 4 * kIters);
  EXPECT_GT(b.run->figures().waits, 0u);
  EXPECT_NE(b.run->Line().find("Policy bsp:"), std::string::npos) << b.run->Line();
}

// A mate that has finished its step of iteration k waits in the round for this solver, so
// this solver must start iteration k on the other machine's step k - 1 alone, without
// counting the mate's step (which would wait for the other machine's step k: a deadlock
// until the timeout).
TEST(PolicyRunTest, AcrossMachinesBspAMateAheadDoesNotHoldTheOtherBack) {
  Policy p = Policy::Parse("bsp");
  p.timeout = 500ms;
  Bench b(p, 2, 1, 4, 0.f);
  std::atomic<int64_t> other{1};  // the other machine has done its step 0 (per solver)
  std::atomic<uint64_t> fresh{0};
  std::atomic<bool> over{false};
  std::thread ticker([&] {
    while (!over.load()) {
      fresh.fetch_add(1);
      std::this_thread::sleep_for(1ms);
    }
  });
  b.run->set_machines([&] { return other.load(); }, [&] { return fresh.load(); }, PollUntil);
  b.run->set_machine_rounds(0.5f, "bsp");
  b.group->done[0].store(2);  // solver 0 finished iteration 1 and is in its round
  b.group->done[1].store(1);  // solver 1 is about to start iteration 1
  const auto t0 = std::chrono::steady_clock::now();
  std::string error;
  try {
    EXPECT_TRUE(b.run->Before(1));
  } catch (const std::exception& e) {  // with the mate counted: an Error after the timeout
    error = e.what();
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  over.store(true);
  ticker.join();
  EXPECT_EQ(error, "");
  EXPECT_LT(secs, 0.4) << "solver 1 waited for the other machine's next step";
  other.store(1);
  b.group->done[1].store(2);  // now solver 1 is at iteration 2 too: it must wait for step 1
  EXPECT_NE(ErrorOf([&] { b.run->Before(1); }).find("stopped progressing"), std::string::npos);
}

TEST(PolicyParse, AcrossMachinesAGroupIsASetOfWholeMachines) {
  EXPECT_EQ(Policy::Parse("bsp").MachineGroups(3, 2), (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(Policy::Parse("gsp:0,1;2,3").MachineGroups(4, 1), (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(Policy::Parse("gsp:2,3;0,1").MachineGroups(2, 2), (std::vector<int>{1, 0}));
  EXPECT_TRUE(Policy::Parse("ssp:2").MachineGroups(4, 1).empty());
  EXPECT_NE(ErrorOf([] { Policy::Parse("gsp:0,2;1,3").MachineGroups(2, 2); }).find("machine 0's solvers (0..1) are in two groups"),
            std::string::npos);
  EXPECT_NE(ErrorOf([] { Policy::Parse("gsp:0,1;2").MachineGroups(2, 2); }).find("solver 3 is in no group"),
            std::string::npos);
}

// easgd's elastic rule on a segment: e = a (w - c); w -= e; c += e, hand-computed, and the sum
// of the two copies never changes.
TEST(PolicyElasticTest, EachExchangePullsTheCopyAndTheCentreTogether) {
  std::vector<float> centre(40, 0.f), local(40, 10.f);
  SegmentOptions o;
  o.chunk_floats = 16;
  o.elastic = 0.25f;
  Segment seg(centre.data(), local.data(), 40, o);
  seg.Sweep();
  EXPECT_EQ(local[0], 7.5f);
  EXPECT_EQ(centre[39], 2.5f);
  seg.Sweep();
  EXPECT_EQ(local[39], 6.25f);
  EXPECT_EQ(centre[0], 3.75f);
  for (size_t x = 0; x < 40; ++x) ASSERT_EQ(local[x] + centre[x], 10.f) << x;
}

}  // namespace
}  // namespace hogstream
