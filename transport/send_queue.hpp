// The send machinery the wire backends (udp/, raw/, verbs/) share: a fixed set of send slots
// (a stack of the free ones, the one acquired and not yet committed), the committed sends
// oldest first, a token-bucket pacer on the bytes that leave, the heartbeat interval, and when
// each peer was last heard (the "peer down" timeout). Plus the two small helpers every
// backend's set-up and CommitSend use: slot memory and the route of a Dest.
// Not for: the wire itself (sockets, the AF_PACKET ring, posting work requests), slot layout
// (each backend's stride and offsets), counters (Transport's). Nothing here blocks or reads a
// clock: callers pass `now`, so tests run on made-up times.
//
// Threads: SendQueue, Pacer and the heartbeat Interval belong to an endpoint's sender thread,
// Liveness to its receiver thread (transport.hpp's model); none locks.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "base/common.hpp"
#include "transport/transport.hpp"

namespace hogstream {

using SteadyTime = std::chrono::steady_clock::time_point;

// Slot memory: `bytes` rounded up to `align`, aligned to `align` (a power of two), zeroed when
// asked. std::bad_alloc when refused.
// A cache line: slots start on one, so two never share a line.
constexpr size_t kLine = 64;

using SlotMemory = std::unique_ptr<std::byte[], void (*)(void*)>;
SlotMemory AllocSlots(size_t bytes, size_t align, bool zero = false);

// A token bucket on bytes: `bytes_per_s` earned continuously, held up to `burst`. Unpaced
// (rate 0): everything fits and nothing is counted.
class Pacer {
 public:
  Pacer() = default;  // unpaced
  // Starts with `start` bytes in the bucket, as of `now`.
  Pacer(uint64_t bytes_per_s, double burst, double start, SteadyTime now)
      : rate_(bytes_per_s), burst_(burst), tokens_(start), last_(now) {}
  bool paced() const { return rate_ != 0; }
  // Adds what the rate earned since the last Refill, up to the burst (paced only).
  void Refill(SteadyTime now);
  // Whether `bytes` (a batch so far, the next frame included) may leave now.
  bool Fits(double bytes) const { return !rate_ || bytes <= tokens_; }
  // `bytes` left (paced only).
  void Spend(double bytes) {
    if (rate_) tokens_ -= bytes;
  }
  double tokens() const { return tokens_; }

 private:
  uint64_t rate_ = 0;
  double burst_ = 0, tokens_ = 0;
  SteadyTime last_{};
};

// "At least every period": Due answers true once `period` has passed since it last did (or
// since `last` at the start; a default time point: due at once), and starts the next period
// from `now`.
class Interval {
 public:
  Interval() = default;
  Interval(std::chrono::milliseconds period, SteadyTime last) : period_(period), last_(last) {}
  bool Due(SteadyTime now) {
    if (now - last_ < period_) return false;
    last_ = now;
    return true;
  }

 private:
  std::chrono::milliseconds period_{0};
  SteadyTime last_{};
};

// Receiver thread: when each peer was last heard (a good frame from its address), and how long
// a heard peer may stay silent before it is down: peer_timeout_ms, or 10 heartbeats when 0
// (both 0, no heartbeats: never; the caller's own layer decides liveness).
// Transport::LatchSilentPeer(heard(), timeout(), backend) judges it.
class Liveness {
 public:
  Liveness(uint32_t heartbeat_ms, uint32_t peer_timeout_ms)
      : timeout_(peer_timeout_ms ? peer_timeout_ms : 10 * heartbeat_ms) {}
  void Heard(PeerId peer, SteadyTime now) { heard_[peer] = now; }
  const std::map<PeerId, SteadyTime>& heard() const { return heard_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  std::chrono::milliseconds timeout_;
  std::map<PeerId, SteadyTime> heard_;
};

// CommitSend: the route of `to` in a backend's tables of peers and groups. One in neither is a
// user Error: "<missing> peer N" / "<missing> group N" (missing: e.g. "udp: no address for").
template <class Route>
const Route& RouteOf(const std::map<PeerId, Route>& peers, const std::map<uint16_t, Route>& groups, Dest to,
                     const char* missing) {
  if (to.group) {
    const auto it = groups.find(to.id);
    HS_REQUIRE(it != groups.end()) << missing << " group " << to.id;
    return it->second;
  }
  const auto it = peers.find(to.id);
  HS_REQUIRE(it != peers.end()) << missing << " peer " << to.id;
  return it->second;
}

// Sender thread: slots 0..slots-1 and the sends committed from them, oldest first. An Entry is
// a backend's queued send: at least `uint32_t slot` and `bytes` (what the pacer counts), plus
// where it goes. A slot is free, acquired (AcquireSend gave it out), queued (committed), or in
// flight (handed to the wire and not yet done: verbs until its completion; udp and raw never,
// a slot the kernel took is free again at once).
template <class Entry>
class SendQueue {
 public:
  SendQueue() = default;  // no slots (assign a real one at set-up)
  // Every slot free, slot 0 on top; the pacer as given (unpaced by default).
  explicit SendQueue(uint32_t slots, Pacer pacer = {}) : pacer_(pacer) {
    free_.reserve(slots);
    for (uint32_t s = slots; s-- > 0;) free_.push_back(s);
    queue_.reserve(slots);
  }

  // AcquireSend: the slot already acquired, else the top free one, now acquired; nullopt when
  // none is free (every slot queued or in flight).
  std::optional<uint32_t> Acquire() {
    if (acquired_ < 0) {
      if (free_.empty()) return std::nullopt;
      acquired_ = free_.back();
      free_.pop_back();
    }
    return static_cast<uint32_t>(acquired_);
  }
  bool acquired() const { return acquired_ >= 0; }
  // CommitSend: the acquired slot. None is a Bug.
  uint32_t acquired_slot() const {
    HS_CHECK(acquired_ >= 0) << "CommitSend without AcquireSend";
    return static_cast<uint32_t>(acquired_);
  }
  // Queues `e`, whose slot is the acquired one (acquired no more).
  void Commit(const Entry& e) {
    HS_CHECK_EQ(int64_t{e.slot}, acquired_) << "a commit of a slot not acquired";
    acquired_ = -1;
    queue_.push_back(e);
  }
  // Every slot is acquired, queued or in flight.
  bool exhausted() const { return free_.empty(); }

  // The queued sends: waiting() of them, at(0) the oldest, contiguous from oldest().
  size_t waiting() const { return queue_.size() - head_; }
  const Entry& at(size_t i) const { return queue_[head_ + i]; }
  const Entry* oldest() const { return queue_.data() + head_; }

  // The oldest n went: the pacer counts their bytes, their slots are free.
  void Sent(size_t n) {
    for (size_t i = 0; i < n; ++i) {
      pacer_.Spend(at(i).bytes);
      free_.push_back(at(i).slot);
    }
    Pop(n);
  }
  // The oldest n will never go (a hard error): their slots are free, nothing counted.
  void Dropped(size_t n) {
    for (size_t i = 0; i < n; ++i) free_.push_back(at(i).slot);
    Pop(n);
  }
  // The oldest n are in flight: they leave the queue, their slots stay taken until Free.
  void Posted(size_t n) { Pop(n); }
  // An in-flight slot is done.
  void Free(uint32_t slot) { free_.push_back(slot); }

  Pacer& pacer() { return pacer_; }

 private:
  void Pop(size_t n) {
    head_ += n;
    if (head_ == queue_.size()) {  // drained: start over at the front
      queue_.clear();
      head_ = 0;
    }
  }

  Pacer pacer_;
  std::vector<uint32_t> free_;  // a stack
  int64_t acquired_ = -1;
  std::vector<Entry> queue_;    // [head_, size) queued, oldest first
  size_t head_ = 0;
};

}  // namespace hogstream
