// A master's sweep pacing (SweepPacer in sync/net_job.hpp): at most one sweep per sweep_ms,
// and with sweeps_per_iter at most that many per iteration of the machine's solvers plus one per
// SweepPacer::kIdleMs, whichever allows fewer chunks; never more than one sweep in one call.
#include <gtest/gtest.h>

#include <random>

#include "sync/net_job.hpp"
#include "test/test_seed.hpp"

namespace hogstream {
namespace HS_UNITY_ID {

// Sweeps posted over `seconds` of 1 ms daemon passes, an iteration every `iteration_ms` (0:
// none), every allowed chunk posted.
double Sweeps(SweepPacer pacer, size_t chunks, double seconds, int iteration_ms) {
  size_t posted = 0;
  const int passes = static_cast<int>(seconds * 1000);
  for (int ms = 1; ms <= passes; ++ms) {
    const int64_t stepped = iteration_ms > 0 && ms % iteration_ms == 0 ? 1 : 0;
    const size_t n = pacer.Allow(chunks, 0.001, stepped);
    EXPECT_LE(n, chunks) << "more than one sweep at once";
    pacer.Spent(n);
    posted += n;
  }
  return static_cast<double>(posted) / static_cast<double>(chunks);
}

TEST(SweepPacer, TheTimeLimitAloneIsOneSweepPerSweepMs) {
  std::mt19937 gen(TestSeed());
  const size_t chunks = 50 + gen() % 300;
  EXPECT_NEAR(Sweeps(SweepPacer(20, 0), chunks, 2.0, 0), 100.0, 1.0) << chunks << " chunks";
  EXPECT_NEAR(Sweeps(SweepPacer(20, 0), chunks, 2.0, 100), 100.0, 1.0);  // iterations do not matter
  EXPECT_NEAR(Sweeps(SweepPacer(0, 0), chunks, 0.5, 0), 500.0, 0.01);    // no limit: every pass
}

TEST(SweepPacer, SlowIterationsHoldTheSweepsToTheirPace) {
  std::mt19937 gen(TestSeed());
  const size_t chunks = 50 + gen() % 300;
  const int iteration_ms = 100 + static_cast<int>(gen() % 100);  // a slow net: 5-10 iterations a second
  const double seconds = 3.0, iterations = static_cast<int>(seconds * 1000) / iteration_ms;
  const double idle = seconds * 1000 / SweepPacer::kIdleMs;
  // Two sweeps per iteration plus the idle trickle, far under the 150 the time limit allows.
  const double two = Sweeps(SweepPacer(20, 2), chunks, seconds, iteration_ms);
  EXPECT_LE(two, 2 * iterations + idle + 1) << iteration_ms << " ms a step, " << chunks << " chunks";
  EXPECT_GE(two, 2 * iterations - 1);
  const double one = Sweeps(SweepPacer(20, 1), chunks, seconds, iteration_ms);
  EXPECT_LE(one, iterations + idle + 1);
  EXPECT_GE(one, iterations - 1);
}

TEST(SweepPacer, FastIterationsLeaveTheTimeLimit) {
  // An iteration every 2 ms (LeNet uncapped): the time limit, 50 sweeps a second, holds.
  EXPECT_NEAR(Sweeps(SweepPacer(20, 2), 200, 2.0, 2), 100.0, 1.0);
}

TEST(SweepPacer, NoIterationsStillSweepOncePerIdleInterval) {
  // Solvers waiting (the start, a joiner, a recovery): positions keep coming, one sweep per
  // kIdleMs, so that whoever waits for them gets them.
  const double seconds = 2.0;
  EXPECT_NEAR(Sweeps(SweepPacer(20, 2), 120, seconds, 0), seconds * 1000 / SweepPacer::kIdleMs, 1.0);
}

}  // namespace
}  // namespace hogstream
