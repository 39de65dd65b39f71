// The hand-shake of a recovery (sync/net_recovery.hpp): asks from several solver threads are
// answered by one recovery the daemon began after them; an ask after it began waits for the
// next; a recovery with no sound copy left for dead_ms fails every ask with one line.
#include "sync/net_recovery.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

namespace hogstream {
namespace HS_UNITY_ID {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

TEST(NetRecoveryTest, OneRecoveryAnswersEveryAskMadeBeforeItBegan) {
  NetRecovery r;
  EXPECT_FALSE(r.pending());
  std::vector<uint64_t> tickets(3);
  std::vector<std::thread> solvers;
  for (size_t i = 0; i < tickets.size(); ++i) solvers.emplace_back([&, i] { tickets[i] = r.Ask(); });
  for (auto& t : solvers) t.join();
  EXPECT_TRUE(r.pending());
  const Clock::time_point t0 = Clock::now();
  r.Begin(t0);
  EXPECT_FALSE(r.pending()) << "one under way";
  EXPECT_TRUE(r.under_way());
  const uint64_t late = r.Ask();  // after it began: the next one answers it
  for (uint64_t t : tickets) EXPECT_FALSE(r.answered(t));
  EXPECT_NEAR(r.Done(t0 + milliseconds(250)), 0.25, 1e-9);
  for (uint64_t t : tickets) EXPECT_TRUE(r.answered(t)) << t;
  EXPECT_FALSE(r.answered(late));
  EXPECT_TRUE(r.pending());
  r.Begin(t0);
  r.Done(t0);
  EXPECT_TRUE(r.answered(late));
  EXPECT_EQ(r.count(), 2u);
  EXPECT_FALSE(r.failed());
  EXPECT_EQ(r.error(), "");
}

TEST(NetRecoveryTest, WithNoSoundCopyForDeadMsItFailsWithOneLine) {
  NetRecovery r;
  const uint64_t ticket = r.Ask();
  const Clock::time_point t0 = Clock::now();
  r.Begin(t0);
  EXPECT_FALSE(r.NoOwnerFor(t0 + milliseconds(300), 300));
  r.SawOwner(t0 + milliseconds(200));
  EXPECT_FALSE(r.NoOwnerFor(t0 + milliseconds(500), 300)) << "an owner seen since";
  EXPECT_TRUE(r.NoOwnerFor(t0 + milliseconds(501), 300));
  r.Fail("every machine's copy diverged");
  EXPECT_TRUE(r.failed());
  EXPECT_FALSE(r.answered(ticket));
  EXPECT_EQ(r.error(), "every machine's copy diverged");
}

}  // namespace
}  // namespace hogstream
