// In-process Transport: a connected pair of endpoints, each direction a ring of preallocated
// slots moved between threads by two lock-free single-producer/single-consumer queues (ready:
// sender -> receiver; free: receiver -> sender). Used by the cpu segment and by tests; it can
// inject faults (drop, duplicate, reorder) with a seeded RNG so the delta rule can be tested
// against a lossy wire. Not for: crossing processes (that is the shm transport).
//
// Contract: as in transport.hpp, each endpoint has one sender thread and one receiver thread.
// Faults are injected on the sender thread at CommitSend; the counters are relaxed atomics
// written only by that thread and readable from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

#include "sync/transport.hpp"

namespace hogstream {

struct FaultOptions {
  double drop = 0;       // probability a message vanishes
  double duplicate = 0;  // probability a message is delivered twice (needs a free slot)
  double reorder = 0;    // probability a message is held back and delivered after the next one
  uint64_t seed = 1;
  // Sender thread: called with every message the injector drops, before its slot is reused.
  // Tests use it to account exactly for lost deltas. May be empty.
  std::function<void(const Message&)> on_drop;

  bool any() const { return drop > 0 || duplicate > 0 || reorder > 0; }
};

struct TransportCounters {
  uint64_t sent = 0;        // CommitSend calls
  uint64_t dropped = 0;
  uint64_t duplicated = 0;
  uint64_t reordered = 0;   // messages held back behind the next one
};

class InprocChannel;  // one direction of a pair; defined in the .cpp (keeps Boost out of here)

class InprocTransport final : public Transport {
 public:
  using Pair = std::pair<std::unique_ptr<InprocTransport>, std::unique_ptr<InprocTransport>>;
  // A connected pair (a, b): what a sends b receives, and back. Each direction has `slots`
  // slots of `max_payload` floats; a_to_b / b_to_a are the faults injected on each direction.
  static Pair MakePair(uint32_t max_payload, uint32_t slots, const FaultOptions& a_to_b = {},
                       const FaultOptions& b_to_a = {});
  ~InprocTransport() override;

  uint32_t max_payload() const override;
  float* AcquireSend() override;
  void CommitSend(MsgKind kind, uint32_t chunk, uint64_t seq, uint32_t length) override;
  bool Poll(Message* out) override;
  void Release() override;

  // Sender thread (or any thread while the link is idle): switch fault injection of the
  // outgoing direction on or off. A message already held back is still delivered after the
  // next one sent.
  void set_faults_enabled(bool on);
  // Any thread: counters of the outgoing direction.
  TransportCounters counters() const;

 private:
  InprocTransport(std::shared_ptr<InprocChannel> out, std::shared_ptr<InprocChannel> in);
  std::shared_ptr<InprocChannel> out_, in_;
};

}  // namespace hogstream
