// How one machine's part of a job across machines ends (sync/net_job.hpp), the two ways:
// - NetLeave, leave on notice (SIGUSR1): its solvers stop and their progress goes out
//   (draining), no new position goes out while the answers to those out come in (quiet), then
//   each owned chunk's final values go out every heartbeat until every live machine says it
//   holds them, or dead_ms pass (handing), and it has left.
// - NetEnd, the end of the job: this machine's solvers done (finished), its progress out once
//   every chunk it does not own has been answered since (flushed); the leader holds its final
//   snapshot until every live machine is flushed and each chunk it does not own has been
//   answered twice more (the owners' values with those deltas in), or drain_ms pass; the
//   leader's done (and a stop request) then end every machine.
// Not for: the messages themselves (NetJob sends them; the endpoints post the finals), who is
// live (sync/net_members.hpp), logging (the daemon says what the steps mean).
// Threads: none; the network daemon calls everything but left(), NetEnd's ended_by(),
// ended_at(), stopped() and all_done() (any thread).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "sync/net_members.hpp"

namespace hogstream {

class NetEndpoints;
class NetShares;
class SlaveEndpoint;

// NetControl::held: the live machines leaving on notice (kNetLeaving) whose every chunk
// (`owners`: per chunk) this machine holds a final of (bit r, machine r < 64).
uint64_t HeldFinals(const NetMembers& members, const std::vector<PeerId>& owners, const SlaveEndpoint& slave);
// Every live other machine says it holds this machine's finals.
bool EveryoneHolds(const NetMembers& members);

class NetLeave {
 public:
  using Clock = std::chrono::steady_clock;
  enum class Step { kNone, kDraining, kQuiet, kHanding, kLeft };
  NetLeave(uint32_t heartbeat_ms, uint32_t dead_ms, uint32_t window)
      : heartbeat_ms_(heartbeat_ms), dead_ms_(dead_ms), window_(window) {}

  Step step() const { return step_; }
  bool leaving() const { return step_ != Step::kNone; }
  bool quiet() const { return step_ >= Step::kQuiet; }  // no position goes out any more
  bool left() const { return left_.load(); }  // any thread
  // Why a notice cannot be taken now (null: it can): `ending`, this machine's solvers are done
  // or the job's end was said; `ready`, the machines that hold the weights (this one counted).
  static const char* Refusal(bool ending, size_t ready);
  // The notice taken at global iteration `iteration`.
  void Begin(Clock::time_point now, int64_t iteration);
  // The log's lines (after "Network: ") for the notice taken (`chunks`: those this machine
  // hands over) and for the leave done, `now`; `me` is this machine's name.
  std::string NoticeLine(const std::string& me, size_t chunks) const;
  std::string LeftLine(const std::string& me, Clock::time_point now) const;

  // What the daemon sees on a pass.
  struct Seen {
    bool flushed = false;    // every chunk it does not own answered since its solvers returned
    bool in_flight = false;  // a master still awaits an answer to a position
    bool held = false;       // every live machine holds this machine's finals
  };
  enum class Do { kWait, kPostFinals, kLeft };
  // One pass while leaving: kPostFinals (a heartbeat since the last sweep of finals: post them
  // all, then FinalsOut), or kLeft once (every live machine holds them, or dead_ms after the
  // quiet began). While quiet, the answers are awaited up to a quarter of dead_ms (at least
  // 50 ms: a slow machine's, not only a fast one's; without a window, nothing is counted and a
  // few heartbeats are waited): a delta applied after the finals would be lost, its sender
  // having taken the final as its own values.
  Do Next(Clock::time_point now, const Seen& seen);
  void FinalsOut(Clock::time_point now);  // a whole sweep of finals went out

  int64_t iteration() const { return iteration_; }
  uint64_t final_sweeps() const { return final_sweeps_; }
  bool held() const { return held_; }  // it left with every live machine holding its finals
  double seconds(Clock::time_point now) const { return std::chrono::duration<double>(now - began_).count(); }

 private:
  uint32_t heartbeat_ms_, dead_ms_, window_;
  Step step_ = Step::kNone;
  Clock::time_point began_, quiet_at_, finals_at_;
  int64_t iteration_ = 0;
  uint64_t final_sweeps_ = 0;
  bool held_ = false;
  std::atomic<bool> left_{false};
};

class NetEnd {
 public:
  using Clock = std::chrono::steady_clock;
  explicit NetEnd(uint32_t drain_ms) : drain_ms_(drain_ms) {}

  // Each pass: `solvers_done` (every local solver returned) makes it finished; then flushed
  // once every chunk another machine masters is answered since, or drain_ms after.
  void Step(Clock::time_point now, bool solvers_done, const NetEndpoints& e, const NetShares& s);
  // The leader, holding its final snapshot: true when it may take it; `late` set when drain_ms
  // passed before the others' last deltas were all in. `others_flushed`: every live machine
  // said it is flushed.
  bool Drained(Clock::time_point now, bool others_flushed, const NetEndpoints& e, const NetShares& s, bool* late);

  bool finished() const { return finished_; }
  bool flushed() const { return flushed_; }
  bool done() const { return done_; }  // the job is over for this machine (it says so back)
  void set_done() { done_ = true; }
  bool stop() const { return stop_; }  // a stop request to pass on
  void set_stop() { stop_ = true; }

  // For any thread: the machine whose word ended this one's training and the global iteration
  // then (-1, 0: none yet; the first word counts), whether that was the leader's stop (a
  // request), and whether every live machine has said it is done too.
  void EndedBy(int r, int64_t at) {
    if (ended_by_.load() >= 0) return;
    ended_at_.store(at);
    ended_by_.store(r);
  }
  int ended_by() const { return ended_by_.load(); }
  int64_t ended_at() const { return ended_at_.load(); }
  void set_stopped() { stopped_.store(true); }
  bool stopped() const { return stopped_.load(); }
  bool set_all_done(bool all) { return all_done_.exchange(all) != all; }  // true: it changed
  bool all_done() const { return all_done_.load(); }

 private:
  uint32_t drain_ms_;
  bool finished_ = false, flushed_ = false, done_ = false, stop_ = false, draining_ = false;
  Clock::time_point finished_at_;
  std::vector<uint64_t> at_finish_, at_drain_;  // answers per chunk then
  std::atomic<int> ended_by_{-1};
  std::atomic<int64_t> ended_at_{0};
  std::atomic<bool> stopped_{false}, all_done_{false};
};

}  // namespace hogstream
