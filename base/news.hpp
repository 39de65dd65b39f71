// News a thread waits for: one side says something changed (Tell), the others wait until a
// condition of theirs holds or a deadline passes (Await), asking it again at every word and at
// least every `recheck` (for what nobody tells: a flag another thread sets without a word).
// Threads: any.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace hogstream {

class NewsBoard {
 public:
  using Clock = std::chrono::steady_clock;
  void Tell() {
    { std::lock_guard<std::mutex> lock(mu_); }  // a waiter between its check and its sleep hears it
    cv_.notify_all();
  }
  // Returns done() (false: the deadline passed first).
  template <typename Done>
  bool Await(const Done& done, Clock::time_point deadline,
             std::chrono::milliseconds recheck = std::chrono::milliseconds(50)) const {
    std::unique_lock<std::mutex> lock(mu_);
    while (!done()) {
      const Clock::time_point now = Clock::now();
      if (now >= deadline) return false;
      cv_.wait_until(lock, std::min(deadline, now + recheck));
    }
    return true;
  }

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
};

}  // namespace hogstream
