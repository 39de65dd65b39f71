// The fault decorator (see endpoint.hpp for the rules). Everything here runs on the wrapped
// endpoint's sender thread, except the pass-through receiver calls and counters().
#include "transport/fault/endpoint.hpp"

#include <cstdlib>
#include <cstring>
#include <new>

namespace hogstream {

FaultEndpoint::FaultEndpoint(std::unique_ptr<Transport> inner, FaultOptions faults)
    : inner_(std::move(inner)), f_(std::move(faults)), rng_(f_.seed), enabled_(f_.any()) {
  HS_CHECK(inner_ != nullptr);
  const Caps c = inner_->caps();
  const size_t bytes = (c.max_payload + 63) / 64 * 64;
  held_.resize(f_.hold);
  for (Held& h : held_) {
    h.buf = {static_cast<std::byte*>(std::aligned_alloc(64, bytes)), std::free};
    if (!h.buf) throw std::bad_alloc();
  }
}

FaultEndpoint::~FaultEndpoint() = default;

size_t FaultEndpoint::held() const {
  size_t n = 0;
  for (const Held& h : held_) n += h.busy;
  return n;
}

FaultEndpoint::Held* FaultEndpoint::FreeHold() {
  for (Held& h : held_)
    if (!h.busy) return &h;
  return nullptr;
}

void FaultEndpoint::Hold(Held* slot, Dest to, uint32_t length, const std::byte* payload) {
  std::memcpy(slot->buf.get(), payload, length);
  slot->busy = true;
  slot->reorder = slot->duplicate = slot->overtaken = false;
  slot->after = 0;
  slot->not_before = {};
  slot->ticket = tickets_;
  slot->to = to;
  slot->length = length;
}

void FaultEndpoint::CommitInner(Dest to, uint32_t length, uint64_t ticket) {
  inner_->CommitSend(to, length);
  for (Held& o : held_) {
    if (!o.busy || ticket <= o.ticket) continue;
    o.overtaken = true;
    if (o.after > 0) --o.after;
  }
}

void FaultEndpoint::ReleaseDue() {
  bool clock_read = false;
  std::chrono::steady_clock::time_point now;
  for (Held& o : held_) {
    if (!o.busy) continue;
    if (enabled_) {
      if (o.after > 0) continue;
      if (o.not_before != std::chrono::steady_clock::time_point{}) {
        if (!clock_read) now = std::chrono::steady_clock::now(), clock_read = true;
        if (now < o.not_before) continue;
      }
    }
    std::byte* s = inner_->AcquireSend();
    if (!s) return;  // goes at a later call
    std::memcpy(s, o.buf.get(), o.length);
    o.busy = false;
    if (o.duplicate) Bump(counters_.duplicated);
    if (o.overtaken) Bump(counters_.reordered);
    CommitInner(o.to, o.length, o.ticket);
  }
}

std::byte* FaultEndpoint::AcquireSend() {
  if (!acquired_) {
    ReleaseDue();
    acquired_ = inner_->AcquireSend();
  }
  return acquired_;
}

void FaultEndpoint::CommitSend(Dest to, uint32_t length) {
  HS_CHECK(acquired_ != nullptr) << "CommitSend without AcquireSend";
  HS_CHECK_LE(length, inner_->caps().max_payload);
  std::byte* slot = acquired_;
  acquired_ = nullptr;
  CountSent(to, length);
  const uint64_t ticket = ++tickets_;
  const bool faulty = enabled_ && (!f_.applies || f_.applies(slot, length));
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  if (faulty && f_.drop > 0 && coin(rng_) < f_.drop) {
    Bump(counters_.dropped);
    if (Counters::Peer* p = to.group ? nullptr : counters_.peer(to.id)) Bump(p->dropped);
    if (f_.on_drop) f_.on_drop(Packet{inner_->self(), length, slot});
    return;  // the inner slot was never committed: its next AcquireSend hands it out again
  }
  const bool dup = faulty && f_.duplicate > 0 && coin(rng_) < f_.duplicate;
  Held* hold = faulty ? FreeHold() : nullptr;
  bool reorder_held = false;
  for (const Held& o : held_) reorder_held |= o.busy && o.reorder;
  if (hold && !reorder_held && f_.reorder > 0 && coin(rng_) < f_.reorder) {
    Hold(hold, to, length, slot);
    hold->reorder = true;
    hold->after = 1;
  } else if (hold && f_.delay > 0 && coin(rng_) < f_.delay) {
    Hold(hold, to, length, slot);
    hold->not_before = std::chrono::steady_clock::now() + std::chrono::microseconds(f_.delay_us);
    Bump(counters_.delayed);
  } else {
    hold = nullptr;
  }
  if (hold) {
    // Held back. A duplicate's first copy goes now (and the held one is the late copy);
    // otherwise the inner slot is abandoned, and handed out again by its next AcquireSend.
    if (dup) {
      hold->duplicate = true;
      CommitInner(to, length, ticket);
    }
  } else {
    Held* copy = dup ? FreeHold() : nullptr;
    if (copy) {
      Hold(copy, to, length, slot);  // due at once: follows the original when a slot is free
      copy->duplicate = true;
    }
    CommitInner(to, length, ticket);
  }
  ReleaseDue();
}

void FaultEndpoint::Flush() {
  // Flush abandons an acquired slot (transport.hpp), so held messages can use it: a caller that
  // keeps a slot acquired between messages must not keep them back for ever.
  acquired_ = nullptr;
  ReleaseDue();
  inner_->Flush();
}

void FaultEndpoint::set_enabled(bool on) {
  enabled_ = on && f_.any();
  if (!acquired_) ReleaseDue();
}

TransportCounters FaultEndpoint::counters() const {
  TransportCounters c = inner_->counters();
  const TransportCounters mine = counters_.Snapshot();
  c.dropped += mine.dropped;
  c.duplicated += mine.duplicated;
  c.reordered += mine.reordered;
  c.delayed += mine.delayed;
  c.sent = mine.sent;  // the caller's commits (dropped and held ones included, copies not)
  c.bytes_sent = mine.bytes_sent;
  return c;
}

std::vector<PeerCounters> FaultEndpoint::peer_counters() const {
  // Received and refused as the inner transport counts them; sent as the caller committed.
  std::map<PeerId, PeerCounters> by;
  for (const PeerCounters& c : inner_->peer_counters()) by[c.peer] = c;
  for (const PeerCounters& m : counters_.PeerSnapshot()) {
    PeerCounters& c = by[m.peer];
    c.peer = m.peer;
    c.sent = m.sent;
    c.bytes_sent = m.bytes_sent;
    c.dropped = m.dropped;
  }
  std::vector<PeerCounters> out;
  for (const auto& [peer, c] : by) out.push_back(c);
  return out;
}

}  // namespace hogstream
