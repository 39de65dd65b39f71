// The endpoints of one machine of a job across machines (sync/net_job.hpp): one slave of every
// chunk another machine masters, a master of this machine's share per destination (one for the
// group where positions multicast), each paced (SweepPacer), and the masters a re-share
// replaced, which take the answers to their positions a while longer. Also the answer counts
// the end of a job and the synchronous rounds read (FreshRounds), and the endpoints' figures,
// the retired masters' kept in the sums.
// Not for: who owns what (sync/net_shares.hpp decides; Reshare here applies its Change), the
// transport (borrowed), what a message is (sync/segment.hpp's TakeData dispatches it).
// Threads: the network daemon calls everything; FreshRounds' counts are read by any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "sync/figures.hpp"
#include "sync/net_shares.hpp"
#include "sync/segment.hpp"

namespace hogstream {

// Pacing of one master's sweeps (each owned chunk's position posted once): at most one sweep
// per sweep_ms (0: no limit) and, where per_iteration > 0, at most that many sweeps per
// iteration of this machine's solvers plus one per kIdleMs, so that positions still flow while
// no solver steps (the start, a joiner taking the weights, a recovery). A sweep
// faster than the solvers step carries little that is new and takes the cores from them: a
// cifar10_quick iteration at 0.4 core lasts as long as seven sweeps at the time limit alone.
// Not on by default (NetJobOptions::sweeps_per_iter = 0): solvers that wait for the exchange
// (bsp, gsp, a machine joining) step rarely, and with the limit their rounds crawl at the
// trickle (docs/experiments/2026-11-28-sweeps-per-iter.md).
class SweepPacer {
 public:
  static constexpr double kIdleMs = 200;
  SweepPacer(uint32_t sweep_ms, uint32_t per_iteration) : sweep_ms_(sweep_ms), per_iteration_(per_iteration) {}
  // How many of `chunks` (one sweep) may go out now, `seconds` and `iterations` (this
  // machine's, never negative) after the last call.
  size_t Allow(size_t chunks, double seconds, int64_t iterations);
  void Spent(size_t posted);

 private:
  uint32_t sweep_ms_, per_iteration_;
  double by_time_ = 0, by_iterations_ = 0;  // credit in chunks
};

// How long a master a re-share replaced still takes the answers to its positions: a second,
// or half of dead_ms where that is longer (a machine may be slow that long and still live; an
// answer given up on loses its delta).
inline constexpr std::chrono::milliseconds kRetiredMasterGrace{1000};
inline std::chrono::milliseconds RetiredMasterGrace(uint32_t dead_ms) {
  return std::max(kRetiredMasterGrace, std::chrono::milliseconds(dead_ms / 2));
}

struct NetEndpointOptions {
  bool multicast = false;  // one master posts to Dest::Group(0)
  uint32_t window = 64;    // positions awaiting their delta, per destination
  uint32_t sweep_ms = 20, sweeps_per_iter = 0;  // SweepPacer's
  uint32_t dead_ms = 2000;                       // RetiredMasterGrace's
};

// Where a refusal came from: "position" (the slave's) or "delta" (a master's).
using NetRefusedFn = std::function<void(PeerId from, uint32_t chunk, Refusal why, const char* what)>;

class NetEndpoints {
 public:
  using Clock = std::chrono::steady_clock;
  NetEndpoints(Transport* transport, NetEndpointOptions opt) : t_(transport), opt_(opt) {}

  // The host copy `w`, cut as `layout`, streamed under `rule` (every master made takes it);
  // the slave made, its refusals to `refused`, as every master's. Once, before the rest.
  void Open(float* w, const ChunkLayout& layout, const SegmentRule& rule, NetRefusedFn refused);
  bool open() const { return slave_ != nullptr; }
  SlaveEndpoint& slave() { return *slave_; }
  const SlaveEndpoint& slave() const { return *slave_; }
  const ChunkLayout& layout() const { return *layout_; }

  // Applies a re-share (NetShares::Reshare's `ch`, `shares` after it; `owned_before`: the chunks
  // this machine mastered before it). The masters replaced are retired for RetiredMasterGrace;
  // each first sends the finals of the chunks that left this machine, with the values its
  // slave side took as `last` for them (what came before is the job's; without the finals the
  // deltas applied here since the new owner's last position would be lost).
  void Reshare(const NetShares& shares, const NetShares::Change& ch, const std::vector<uint32_t>& owned_before,
               PeerId self, int machines, Clock::time_point now);
  // A new machine joined: a master slot for it (not multicast).
  void Grow(int machines);
  // One daemon pass: every master posts what its pacer allows (`chunks`: one sweep), at the
  // job's `clock` (the staleness of the answers); `local_iterations`: this machine's so far.
  // Retired masters past their grace go, their figures kept.
  void Post(size_t chunks, uint64_t clock, int64_t local_iterations, Clock::time_point now);
  // The master a delta answers: this machine's current one for its sender, or one a re-share
  // retired that posted the position (by epoch) while it takes answers.
  MasterEndpoint* MasterFor(const Message& m);
  bool InFlight() const;  // a current master awaits an answer
  bool PostFinals();      // every current master's finals (false: slots ran out; call again)
  size_t destinations() const;  // current masters

  // Answers per chunk so far (the slave's), and whether every chunk another machine masters
  // has been answered `more` times since `at`.
  std::vector<uint64_t> Answers(size_t chunks) const;
  bool AnsweredSince(const std::vector<uint64_t>& at, uint64_t more, const NetShares& shares) const;

  // The masters' figures (current and retired, per sender too) and the slave's, into `s`
  // (its peers already listed, by rank).
  void Figures(NetworkFigures* s, int machines, const NetShares& shares) const;

 private:
  void Make(const std::vector<NetShares::Master>& make, const std::vector<uint32_t>& owned, uint32_t receivers,
            int machines);
  void Expire(Clock::time_point now);

  Transport* t_;
  NetEndpointOptions opt_;
  float* w_ = nullptr;
  std::unique_ptr<ChunkLayout> layout_;
  SegmentRule rule_;
  NetRefusedFn refused_;
  std::unique_ptr<SlaveEndpoint> slave_;
  std::vector<std::unique_ptr<MasterEndpoint>> masters_;  // [0] multicast; else per rank
  std::vector<SweepPacer> pacers_;                        // per master
  Clock::time_point last_post_{};
  int64_t posted_at_iterations_ = 0;
  std::vector<std::pair<Clock::time_point, std::unique_ptr<MasterEndpoint>>> retired_;  // until when
  MasterEndpoint::Stats retired_sum_{};                     // the figures of masters gone, summed
  std::vector<MasterEndpoint::SourceStats> retired_from_;   // theirs per sender, by rank
};

// The synchronous rounds a policy waits for (ssp, bsp, gsp across machines): a fresh round ends
// when every chunk another machine masters has been answered since the last one ended; the
// iterations this machine had run when a round began have then gone out (flushed_iter).
// The daemon calls Step; any thread reads the counts.
class FreshRounds {
 public:
  // True when a round ended now.
  bool Step(const NetEndpoints& e, const NetShares& shares, int64_t local_iterations);
  uint64_t rounds() const { return rounds_.load(std::memory_order_relaxed); }
  int64_t flushed_iter() const { return flushed_iter_.load(std::memory_order_relaxed); }

 private:
  std::vector<uint64_t> mark_;  // per chunk, its answers when this round began
  int64_t mark_iter_ = 0;       // this machine's iterations then
  std::atomic<uint64_t> rounds_{0};
  std::atomic<int64_t> flushed_iter_{0};
};

}  // namespace hogstream
