// In-process transport: slot storage, the two SPSC queues per direction, fault injection.
// Ordering: boost::lockfree::spsc_queue publishes with release on push and acquires on pop, so
// a slot's payload and header, written before its index is pushed on `ready`, are visible to
// the receiver that pops the index; likewise the receiver is done reading a slot before it
// pushes the index back on `free`, so the sender never overwrites a slot still being read.
#include "sync/inproc_transport.hpp"

#include <boost/lockfree/spsc_queue.hpp>
#include <cstdlib>
#include <new>
#include <random>
#include <vector>

#include "core/common.hpp"

namespace hogstream {

namespace {
constexpr int64_t kNone = -1;
constexpr size_t kLine = 64;

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};

// Single-writer counter: a relaxed load + store is enough and avoids a locked add.
void Bump(std::atomic<uint64_t>& c) { c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }
}  // namespace

class InprocChannel {
 public:
  InprocChannel(uint32_t max_payload, uint32_t slots, FaultOptions faults)
      : max_payload_(max_payload),
        stride_((max_payload * sizeof(float) + kLine - 1) / kLine * kLine / sizeof(float)),
        headers_(slots),
        ready_(slots + 1),
        free_(slots + 1),
        faults_(std::move(faults)),
        rng_(faults_.seed) {
    HS_REQUIRE(max_payload > 0 && slots > 0) << "inproc transport needs max_payload and slots > 0";
    storage_.reset(static_cast<float*>(std::aligned_alloc(kLine, stride_ * slots * sizeof(float))));
    if (!storage_) throw std::bad_alloc();
    for (uint32_t s = 0; s < slots; ++s) HS_CHECK(free_.push(s));
    faulty_.store(faults_.any(), std::memory_order_relaxed);
  }

  uint32_t max_payload() const { return max_payload_; }
  float* slot(int64_t s) { return storage_.get() + static_cast<size_t>(s) * stride_; }

  // ---- sender thread
  float* Acquire() {
    if (acquired_ == kNone) {
      uint32_t s;
      if (!free_.pop(s)) {
        // A message held back for reordering waits for the next one; with every other slot
        // in flight (always, with one slot) there will be none until it goes: send it now.
        Flush();
        return nullptr;
      }
      acquired_ = s;
    }
    return slot(acquired_);
  }

  void Commit(MsgKind kind, uint32_t chunk, uint64_t seq, uint32_t length) {
    HS_CHECK(acquired_ != kNone) << "CommitSend without AcquireSend";
    HS_CHECK_LE(length, max_payload_);
    const int64_t s = acquired_;
    acquired_ = kNone;
    headers_[s] = Message{kind, chunk, seq, length, slot(s)};
    Bump(sent_);
    if (!faulty_.load(std::memory_order_relaxed)) {
      Deliver(s);
      return;
    }
    std::uniform_real_distribution<double> coin(0.0, 1.0);
    if (faults_.drop > 0 && coin(rng_) < faults_.drop) {
      Bump(dropped_);
      if (faults_.on_drop) faults_.on_drop(headers_[s]);
      acquired_ = s;  // the slot never left; the next Acquire hands it out again
      return;
    }
    int64_t copy = kNone;
    uint32_t c;
    if (faults_.duplicate > 0 && coin(rng_) < faults_.duplicate && free_.pop(c)) {
      copy = c;
      std::memcpy(slot(copy), slot(s), sizeof(float) * length);
      headers_[copy] = Message{kind, chunk, seq, length, slot(copy)};
      Bump(duplicated_);
    }
    if (held_ == kNone && faults_.reorder > 0 && coin(rng_) < faults_.reorder) {
      held_ = s;  // goes out right after the next message
      Bump(reordered_);
      if (copy != kNone) Push(copy);
      return;
    }
    Push(s);
    if (copy != kNone) Push(copy);
    Release(held_);
  }

  // Sender thread. Turning faults off also lets a held-back message go.
  void set_faulty(bool on) {
    faulty_.store(on && faults_.any(), std::memory_order_relaxed);
    if (!on) Flush();
  }

  // ---- receiver thread
  bool Poll(Message* out) {
    HS_CHECK(in_hand_ == kNone) << "Poll before Release of the previous message";
    uint32_t s;
    if (!ready_.pop(s)) return false;
    in_hand_ = s;
    *out = headers_[s];
    return true;
  }
  void ReleaseInHand() {
    if (in_hand_ == kNone) return;
    HS_CHECK(free_.push(static_cast<uint32_t>(in_hand_)));
    in_hand_ = kNone;
  }

  TransportCounters counters() const {
    return {sent_.load(std::memory_order_relaxed), dropped_.load(std::memory_order_relaxed),
            duplicated_.load(std::memory_order_relaxed), reordered_.load(std::memory_order_relaxed)};
  }

 private:
  void Push(int64_t s) { HS_CHECK(ready_.push(static_cast<uint32_t>(s))); }  // never full: slots+1
  void Deliver(int64_t s) {
    Push(s);
    Release(held_);
  }
  // Sends a held-back message with nothing overtaking it: in the end it was not reordered.
  void Flush() {
    if (held_ == kNone) return;
    Release(held_);
    reordered_.fetch_sub(1, std::memory_order_relaxed);
  }
  void Release(int64_t& held) {
    if (held == kNone) return;
    Push(held);
    held = kNone;
  }

  const uint32_t max_payload_;
  const size_t stride_;  // floats between slots: payload rounded up to a cache line
  std::unique_ptr<float[], FreeDeleter> storage_;
  std::vector<Message> headers_;  // one per slot; written by the sender before the push
  boost::lockfree::spsc_queue<uint32_t> ready_;  // producer: sender; consumer: receiver
  boost::lockfree::spsc_queue<uint32_t> free_;   // producer: receiver; consumer: sender

  // Sender-thread state.
  alignas(kLine) int64_t acquired_ = kNone;
  int64_t held_ = kNone;  // slot held back for reordering
  FaultOptions faults_;
  std::mt19937_64 rng_;
  std::atomic<bool> faulty_{false};
  std::atomic<uint64_t> sent_{0}, dropped_{0}, duplicated_{0}, reordered_{0};

  // Receiver-thread state.
  alignas(kLine) int64_t in_hand_ = kNone;
};

InprocTransport::Pair InprocTransport::MakePair(uint32_t max_payload, uint32_t slots,
                                                const FaultOptions& a_to_b, const FaultOptions& b_to_a) {
  auto ab = std::make_shared<InprocChannel>(max_payload, slots, a_to_b);
  auto ba = std::make_shared<InprocChannel>(max_payload, slots, b_to_a);
  return {std::unique_ptr<InprocTransport>(new InprocTransport(ab, ba)),
          std::unique_ptr<InprocTransport>(new InprocTransport(ba, ab))};
}

InprocTransport::InprocTransport(std::shared_ptr<InprocChannel> out, std::shared_ptr<InprocChannel> in)
    : out_(std::move(out)), in_(std::move(in)) {}
InprocTransport::~InprocTransport() = default;

uint32_t InprocTransport::max_payload() const { return out_->max_payload(); }
float* InprocTransport::AcquireSend() { return out_->Acquire(); }
void InprocTransport::CommitSend(MsgKind kind, uint32_t chunk, uint64_t seq, uint32_t length) {
  out_->Commit(kind, chunk, seq, length);
}
bool InprocTransport::Poll(Message* out) { return in_->Poll(out); }
void InprocTransport::Release() { in_->ReleaseInHand(); }
void InprocTransport::set_faults_enabled(bool on) { out_->set_faulty(on); }
TransportCounters InprocTransport::counters() const { return out_->counters(); }

}  // namespace hogstream
