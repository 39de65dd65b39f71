// The hand-shake of a recovery (NetJob::Recover, sync/net_job.hpp): a machine whose copy of the
// weights went non-finite gives up its chunks and re-takes every one whole from the others'
// positions. Solver threads ask (any number, at once); the network daemon begins one recovery
// for all the asks so far, ends it when every chunk came from another machine's sound copy, or
// fails it when no other machine has one for dead_ms. Not for: the re-take itself (the daemon
// drives the endpoints), the wait (NetJob's AwaitNews).
// Threads: Ask, answered, failed and error from any thread; the rest on the daemon only.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

namespace hogstream {

class NetRecovery {
 public:
  using Clock = std::chrono::steady_clock;
  // Any thread: asks for a recovery; the ticket it is answered by.
  uint64_t Ask() { return asked_.fetch_add(1) + 1; }
  bool answered(uint64_t ticket) const { return done_.load() >= ticket; }
  bool failed() const { return failed_.load(); }
  std::string error() const { return failed() ? error_ : std::string(); }

  // Daemon: an ask no recovery under way answers.
  bool pending() const { return !under_way_ && asked_.load() > done_.load(); }
  bool under_way() const { return under_way_; }
  // Daemon: begins one, for every ask so far.
  void Begin(Clock::time_point now) {
    target_ = asked_.load();
    under_way_ = true;
    began_ = owner_seen_ = now;
  }
  // Daemon, while under way: another machine with the weights was seen now.
  void SawOwner(Clock::time_point now) { owner_seen_ = now; }
  // ... and none for `ms`.
  bool NoOwnerFor(Clock::time_point now, uint32_t ms) const {
    return now - owner_seen_ > std::chrono::milliseconds(ms);
  }
  // Daemon: the weights re-taken; every ask it began with is answered. Returns its seconds.
  double Done(Clock::time_point now) {
    under_way_ = false;
    ++count_;
    done_.store(target_);
    return std::chrono::duration<double>(now - began_).count();
  }
  // Daemon: the job cannot recover (`why`, one line).
  void Fail(std::string why) {
    error_ = std::move(why);
    failed_.store(true);
  }
  uint64_t count() const { return count_; }  // daemon: recoveries ended well

 private:
  std::atomic<uint64_t> asked_{0}, done_{0};
  std::atomic<bool> failed_{false};
  std::string error_;        // set before failed_
  uint64_t target_ = 0;      // daemon: the asks the recovery under way answers
  bool under_way_ = false;   // daemon
  Clock::time_point began_, owner_seen_;  // daemon
  uint64_t count_ = 0;       // daemon
};

}  // namespace hogstream
