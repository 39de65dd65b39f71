// Fault injection as a decorator over any Transport: drop, duplicate, reorder and delay
// outgoing messages, by rate and seed, for chosen message kinds. Every backend is tested under
// loss through it (and the in-process segment runs its lossy mode through it). Not for
// production links: it costs a copy per held message.
//
// Faults act on the sender side, at CommitSend, on the sender thread. A held message (reordered,
// delayed, or the second copy of a duplicate) lives in one of `hold` buffers owned here and is
// committed to the inner transport later, by the sender's next AcquireSend (with no slot
// outstanding), CommitSend or Flush, once it is due and the inner transport has a free slot:
//   reordered: due after one later message went out (so it arrives behind it);
//   delayed:   due `delay_us` after it was committed;
//   duplicate: due at once (the copy follows the original).
// With every hold buffer in use, a message is sent unharmed. Counters: dropped and delayed
// count when decided; duplicated when the second copy goes out; reordered when a held message
// or copy goes out behind one committed after it. So they match what a receiver sees.
// The receiver side (Poll, Release), status, wait_fd and caps pass straight through.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "transport/transport.hpp"

namespace hogstream {

struct FaultOptions {
  double drop = 0;       // probability a message vanishes
  double duplicate = 0;  // probability a message is delivered twice
  double reorder = 0;    // probability a message is held back and delivered after the next one
  double delay = 0;      // probability a message is held back for delay_us
  uint32_t delay_us = 1000;
  // Which messages faults apply to (by their payload: the decorator does not know what it
  // means; sync/wire.hpp's FaultsOn makes one for message kinds); empty: all. Others pass unharmed.
  std::function<bool(const std::byte* payload, uint32_t length)> applies;
  uint32_t hold = 8;     // hold buffers: most messages held back at once
  uint64_t seed = 1;
  // Sender thread: called with every message the injector drops, before its slot is reused.
  // Tests use it to account exactly for lost deltas. May be empty.
  std::function<void(const Packet&)> on_drop;

  bool any() const { return drop > 0 || duplicate > 0 || reorder > 0 || delay > 0; }
};

class FaultEndpoint final : public Transport {
 public:
  FaultEndpoint(std::unique_ptr<Transport> inner, FaultOptions faults);
  ~FaultEndpoint() override;

  PeerId self() const override { return inner_->self(); }
  Caps caps() const override { return inner_->caps(); }
  std::byte* AcquireSend() override;
  void CommitSend(Dest to, uint32_t length) override;
  void Flush() override;
  size_t Poll(Packet* out, size_t max) override { return inner_->Poll(out, max); }
  void Release(size_t n) override { inner_->Release(n); }
  Status status() const override { return inner_->status(); }
  int wait_fd() const override { return inner_->wait_fd(); }
  void set_admit(AdmitFn admit) override { inner_->set_admit(std::move(admit)); }
  // The inner transport's counters, with the injected faults of this decorator.
  TransportCounters counters() const override;
  std::vector<PeerCounters> peer_counters() const override;

  // Sender thread: faults on or off. Off also makes every held message due at once (they go as
  // soon as the inner transport has slots: at the latest over the next few sender calls).
  void set_enabled(bool on);
  Transport* inner() const { return inner_.get(); }
  // Sender thread: messages held back now.
  size_t held() const;

 private:
  struct Held {
    std::unique_ptr<std::byte[], void (*)(void*)> buf{nullptr, nullptr};
    bool busy = false;
    bool reorder = false;     // held for reordering (at most one such at a time)
    bool duplicate = false;   // counts as duplicated when it goes
    bool overtaken = false;   // a later-committed message went out first: counts as reordered
    uint64_t ticket = 0;      // the caller's commit it copies (commit order)
    uint32_t after = 0;       // later-committed messages that must go first
    std::chrono::steady_clock::time_point not_before{};
    Dest to;
    uint32_t length = 0;
  };
  Held* FreeHold();
  void Hold(Held* slot, Dest to, uint32_t length, const std::byte* payload);
  // Commits inner's acquired slot holding the caller's commit number `ticket`; ages held ones.
  void CommitInner(Dest to, uint32_t length, uint64_t ticket);
  void ReleaseDue();

  std::unique_ptr<Transport> inner_;
  FaultOptions f_;
  std::mt19937_64 rng_;
  bool enabled_;
  std::byte* acquired_ = nullptr;  // the inner slot handed to our caller, not yet committed
  std::vector<Held> held_;
  uint64_t tickets_ = 0;  // caller commits so far
};

}  // namespace hogstream
