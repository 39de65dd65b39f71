// How one machine of a job across machines (sync/net_job.hpp) begins: a new job starts once
// every machine is heard from and ready (each is ready as soon as it has heard every other
// one); a machine that finds the job running joins it once it hears a strict majority, at the
// median of their views of the global iteration; a start fails with one line when a machine
// stays silent for start_ms (NoWordLine says who, and what may be wrong), when the others
// disagree with this one (after a few heartbeats, so that they hear this one and name the
// difference too), or when --svb would have to join a running job.
// Joining (a newcomer, or a machine recovering its weights) ends once every chunk came whole
// from another machine's sound copy, or fails with one line.
// Not for: the joiner's taking of the weights (the daemon drives the endpoints), liveness and
// views (sync/net_members.hpp decides them; this room reads them).
// Threads: Decide, Join and Disagreed on the network daemon; ok(), failed() from any thread, error()
// once failed() is seen.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "sync/net_members.hpp"

namespace hogstream {

struct FrameLosses;
class NetRecovery;
class SlaveEndpoint;

class NetStart {
 public:
  using Clock = std::chrono::steady_clock;
  NetStart(uint32_t start_ms, uint32_t heartbeat_ms) : start_ms_(start_ms), heartbeat_ms_(heartbeat_ms) {}

  enum class Go {
    kWait,            // not yet
    kJoinRunning,     // the job runs: join it at members.MedianView()
    kTrain,           // every machine heard and ready (or the job runs and this one is one of its first)
    kSilent,          // start_ms passed without every machine (NoWordLine)
    kFailed,          // error() says why: --svb and the job runs (W never travels as values),
                      // or a machine that disagrees was heard
  };
  // One pass of the daemon before training, `started` when it began. Sets `members` ready once
  // every other machine is live (from then on, this machine is one of a new job's first).
  Go Decide(Clock::time_point now, Clock::time_point started, NetMembers& members, bool svb);
  // The joining phase (a newcomer to a running job, or a recovery: `recovery.under_way()`),
  // one pass: kJoined once every chunk came whole from another machine's sound copy (`owner`:
  // another live machine has the weights; where none has, a recovery would re-take this
  // machine's own non-finite weights, so it waits for one). kFailed with one line: a recovery
  // that saw no owner for `dead_ms` (recovery.error()), a newcomer still short of chunks
  // start_ms after `started` (error()).
  enum class Joining { kWait, kJoined, kFailed };
  Joining Join(Clock::time_point now, Clock::time_point started, const SlaveEndpoint& slave, bool owner,
               NetRecovery& recovery, uint32_t dead_ms);
  // A machine disagrees (`why`, one line; the first kept): the start ends five heartbeats on.
  void Disagreed(Clock::time_point now, std::string why);

  void Ok() { ok_.store(true); }
  void Fail(std::string why) {
    if (!why.empty()) error_ = std::move(why);
    failed_.store(true);
  }
  bool ok() const { return ok_.load(); }
  bool failed() const { return failed_.load(); }
  const std::string& error() const { return error_; }

 private:
  uint32_t start_ms_, heartbeat_ms_;
  std::atomic<bool> ok_{false}, failed_{false};
  std::string error_;  // set before failed_
  bool disagreed_ = false;
  Clock::time_point disagreed_at_;
};

// "no word from machine 2 (udp://...) after 60 s; 12 frames failed the MAC: does every machine
// have the same --job-key?": the silent machines (not live in `members`), and what the frames
// refused (`losses`) or the unproven control messages suggest.
std::string NoWordLine(const NetMembers& members, const std::vector<std::string>& names, uint32_t start_ms,
                       const FrameLosses& losses, uint64_t unproven);

}  // namespace hogstream
