// In-process endpoint: slot storage and the two SPSC queues per direction.
// Ordering: boost::lockfree::spsc_queue publishes with release on push and acquires on pop, so
// a slot's payload and header, written before its index is pushed on `ready`, are visible to
// the receiver that pops the index; likewise the receiver is done reading a slot before it
// pushes the index back on `free`, so the sender never overwrites a slot still being read.
#include "transport/inproc/endpoint.hpp"

#include <boost/lockfree/spsc_queue.hpp>
#include <cstdlib>
#include <new>
#include <vector>

#include "transport/inproc/device.hpp"
#include "transport/send_queue.hpp"

namespace hogstream {

namespace {
constexpr int64_t kNone = -1;
struct FreeDeleter {
  void operator()(std::byte* p) const { std::free(p); }
};
}  // namespace

class InprocChannel {
 public:
  InprocChannel(uint32_t max_payload, uint32_t slots)
      : max_payload_(max_payload),
        stride_((max_payload + kLine - 1) / kLine * kLine),
        slots_(slots),
        sent_(slots),
        ready_(slots + 1),  // +1: a ring of n+1 holds n, so a push of any of our slots fits
        free_(slots + 1),
        held_(slots) {
    HS_REQUIRE(max_payload > 0 && slots > 0) << "inproc transport needs max_payload and slots > 0";
    storage_.reset(static_cast<std::byte*>(std::aligned_alloc(kLine, stride_ * slots)));
    if (!storage_) throw std::bad_alloc();
    for (uint32_t s = 0; s < slots; ++s) HS_CHECK(free_.push(s));
  }

  uint32_t max_payload() const { return max_payload_; }
  uint32_t slots() const { return slots_; }
  std::byte* slot(int64_t s) { return storage_.get() + static_cast<size_t>(s) * stride_; }

  // ---- sender thread
  std::byte* Acquire() {
    if (acquired_ == kNone) {
      uint32_t s;
      if (!free_.pop(s)) return nullptr;
      acquired_ = s;
    }
    return slot(acquired_);
  }
  void Commit(PeerId source, uint32_t length) {
    HS_CHECK(acquired_ != kNone) << "CommitSend without AcquireSend";
    HS_CHECK_LE(length, max_payload_);
    sent_[acquired_] = Sent{source, length};
    HS_CHECK(ready_.push(static_cast<uint32_t>(acquired_)));  // never full: slots + 1
    acquired_ = kNone;
  }

  // ---- receiver thread
  size_t Poll(Packet* out, size_t max) {
    size_t n = 0;
    uint32_t s;
    while (n < max && ready_.pop(s)) {
      held_[(held_first_ + held_count_++) % slots_] = s;
      out[n++] = Packet{sent_[s].source, sent_[s].length, slot(s)};
    }
    return n;
  }
  void Release(size_t n) {
    HS_CHECK_LE(n, held_count_) << "Release of more messages than Poll handed out";
    for (; n > 0; --n, --held_count_, held_first_ = (held_first_ + 1) % slots_)
      HS_CHECK(free_.push(held_[held_first_]));
  }

  std::atomic<bool> sender_gone{false}, receiver_gone{false};  // set by the endpoints' destructors

 private:
  const uint32_t max_payload_;
  const size_t stride_;  // bytes between slots: payload rounded up to a cache line
  const uint32_t slots_;
  std::unique_ptr<std::byte[], FreeDeleter> storage_;
  struct Sent {
    PeerId source;
    uint32_t length;
  };
  std::vector<Sent> sent_;  // one per slot; written by the sender before the push
  boost::lockfree::spsc_queue<uint32_t> ready_;  // producer: sender; consumer: receiver
  boost::lockfree::spsc_queue<uint32_t> free_;   // producer: receiver; consumer: sender

  alignas(kLine) int64_t acquired_ = kNone;  // sender thread

  // Receiver thread: slots handed out by Poll, oldest first (a ring of `slots_`: at most every
  // slot can be held).
  alignas(kLine) std::vector<uint32_t> held_;
  size_t held_first_ = 0, held_count_ = 0;
};

InprocEndpoint::InprocEndpoint(PeerId self, std::shared_ptr<InprocChannel> out,
                               std::shared_ptr<InprocChannel> in)
    : self_(self), out_(std::move(out)), in_(std::move(in)) {}

InprocEndpoint::~InprocEndpoint() {
  out_->sender_gone.store(true, std::memory_order_release);
  in_->receiver_gone.store(true, std::memory_order_release);
}

Caps InprocEndpoint::caps() const {
  Caps c;
  c.max_payload = out_->max_payload();
  c.alignment = kLine;
  c.send_slots = out_->slots();
  c.max_batch = in_->slots();
  c.multicast = true;  // a group is the other peer
  return c;
}

std::byte* InprocEndpoint::AcquireSend() {
  std::byte* s = out_->Acquire();
  if (!s) Bump(counters_.send_full);
  return s;
}

void InprocEndpoint::CommitSend(Dest to, uint32_t length) {
  HS_CHECK(to.group || to.id == (self_ ^ 1)) << "inproc: no peer " << to.id;
  out_->Commit(self_, length);
  CountSent(to, length);
}

size_t InprocEndpoint::Poll(Packet* out, size_t max) {
  const size_t n = in_->Poll(out, max);
  CountReceived(out, n);
  return n;
}

void InprocEndpoint::Release(size_t n) { in_->Release(n); }

Status InprocEndpoint::status() const {
  Status s;
  if (in_->sender_gone.load(std::memory_order_acquire) || out_->receiver_gone.load(std::memory_order_acquire)) {
    s.code = Status::kPeerDown;
    s.peer = self_ ^ 1;
    s.what = "inproc peer " + std::to_string(s.peer) + " closed its endpoint";
  }
  return s;
}

// ---------------------------------------------------------------- device

InprocDevice::InprocDevice(const InprocOptions& opt)
    : to1_(std::make_shared<InprocChannel>(opt.max_payload, opt.slots)),
      to0_(std::make_shared<InprocChannel>(opt.max_payload, opt.slots)) {}

std::unique_ptr<Transport> InprocDevice::Open(PeerId self) {
  HS_REQUIRE(self <= 1) << "inproc transport: peer " << self << " (a pair has peers 0 and 1)";
  HS_REQUIRE(!opened_[self]) << "inproc transport: peer " << self << " opened twice";
  opened_[self] = true;
  return self == 0 ? std::make_unique<InprocEndpoint>(0, to1_, to0_)
                   : std::make_unique<InprocEndpoint>(1, to0_, to1_);
}

InprocDevice::Pair InprocDevice::MakePair(const InprocOptions& opt) {
  InprocDevice d(opt);
  auto a = d.Open(0);
  return {std::move(a), d.Open(1)};
}

}  // namespace hogstream
