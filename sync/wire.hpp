// sync/'s words on a wire: what its messages are (MsgKind), how their values are encoded
// (Encoding), and the small header sync puts at the start of every payload it sends (chunk,
// seq, clock, epoch). A transport carries these bytes without reading them (transport.hpp);
// `Wire` is a Transport as sync sees it: messages with that header, written on send and
// checked on receipt. Not for: frames, checksums, MACs, peers' addresses (transport/).
//
// Layout of sync's header (little-endian, 32 bytes, so the values after it stay 16-aligned):
//    0 kind u8   1 encoding u8   2 zero u16   4 epoch u32   8 chunk u32   12 zero u32
//   16 seq u64  24 clock u64     32 values[length]
//
// Threads: as the Transport it wraps: one sender thread (AcquireSend, CommitSend, PostSend,
// Flush), one receiver thread (Poll, Release); the rest from any. Several Wires may send on one
// transport; only one may poll it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "transport/transport.hpp"

namespace hogstream {

enum class MsgKind : uint8_t {
  kPosition = 1,   // master -> slave: the master's current values of one chunk
  kDelta = 2,      // slave -> master: the slave's progress on that chunk, answering a position
  kIteration = 3,  // control: a machine's figures and state (sync/net_job.hpp); no values
  kFactors = 4,    // one part of an InnerProduct layer's sufficient vectors (--svb, sync/svb.hpp)
  kFinal = 5,      // master -> slave: a leaving master's last values of one chunk, taken without
                   // an answer (the slave's progress waits for the chunk's next master)
};
constexpr int kMsgKinds = 6;  // one past the largest MsgKind value (for per-kind tables)
const char* MsgKindName(MsgKind k);

// How the payload's values are encoded (sync/codec.hpp writes and reads the compressed ones).
enum class Encoding : uint8_t {
  kFloat32 = 1,  // n floats
  kFloat16 = 2,  // n IEEE halves
  kInt8 = 3,     // a float scale per block of 64 values, then n signed bytes
  kTopK = 4,     // k uint32 indices, then k floats; the rest are zero
};
constexpr uint8_t kMaxEncoding = 4;

// What a message says about itself. The sender fills everything but `source`, which comes from
// the transport (a receiver must not trust a claimed source).
struct Header {
  MsgKind kind = MsgKind::kPosition;
  Encoding encoding = Encoding::kFloat32;
  PeerId source = kNoPeer;  // from the transport: the peer that sent it
  uint32_t epoch = 0;       // the sender's incarnation: a restarted master starts a new one
  uint32_t chunk = 0;       // chunk index in the flat buffer
  uint64_t seq = 0;         // per-chunk sequence number, set by the master, echoed by the slave
  uint64_t clock = 0;       // the sender's iteration clock (staleness policies read it)
  uint32_t length = 0;      // bytes after sync's header
};

// A received message: the header and a view of its values, valid until its Release.
struct Message {
  Header h;
  const std::byte* payload = nullptr;  // 16-aligned
  const float* floats() const { return reinterpret_cast<const float*>(payload); }
  uint32_t float_count() const { return h.length / sizeof(float); }
};

// sync's header in front of every payload.
constexpr uint32_t kWireHeaderBytes = 32;
// Writes h (not h.source) into the kWireHeaderBytes at `at`.
void PutHeader(std::byte* at, const Header& h);
// Reads sync's header from a payload received from `source`; false (and *h untouched) when it
// is not one of sync's messages: too short, an unknown kind or encoding, a float32 payload that
// is not whole floats, reserved bytes not zero.
bool GetHeader(const std::byte* payload, uint32_t length, PeerId source, Header* h);

// Which messages a fault decorator harms (FaultOptions::applies): those whose kind is in
// `kinds`, a mask of 1 << MsgKind bits (KindBit).
constexpr uint32_t KindBit(MsgKind k) { return 1u << static_cast<unsigned>(k); }
std::function<bool(const std::byte*, uint32_t)> FaultsOn(uint32_t kinds);
// The sync message a fault decorator dropped (FaultOptions::on_drop), for tests that account
// for every lost delta.
Message MessageOf(const Packet& p);

class Wire {
 public:
  // `t` (not owned) outlives the Wire.
  explicit Wire(Transport* t = nullptr) : t_(t) {}
  Wire(const Wire&) = delete;
  Wire& operator=(const Wire&) = delete;

  Transport* transport() const { return t_; }
  PeerId self() const { return t_->self(); }
  // The transport's caps with max_payload less sync's header: the values one message carries.
  Caps caps() const;

  // ---- sender thread (as Transport's)
  // Room for h.length bytes of values, after where sync's header goes; nullptr: no slot.
  std::byte* AcquireSend() {
    std::byte* slot = t_->AcquireSend();
    return slot ? slot + kWireHeaderBytes : nullptr;
  }
  void CommitSend(Dest to, const Header& h);
  bool PostSend(Dest to, const Header& h, const void* values);
  void Flush() { t_->Flush(); }

  // ---- receiver thread
  // Up to `max` of sync's messages, oldest first. A payload that is not one (GetHeader) is
  // counted (malformed()) and released with the messages around it, never handed out.
  size_t Poll(Message* out, size_t max);
  // Hands back the oldest n messages Poll handed out (and the refused ones among them).
  void Release(size_t n);

  // ---- any thread
  Status status() const { return t_->status(); }
  int wait_fd() const { return t_->wait_fd(); }
  void Idle(std::chrono::milliseconds most, std::chrono::microseconds no_fd) const { t_->Idle(most, no_fd); }
  TransportCounters counters() const { return t_->counters(); }
  std::vector<PeerCounters> peer_counters() const { return t_->peer_counters(); }
  // Payloads refused as not sync's (from peers of the job, with a good MAC or checksum).
  uint64_t malformed() const { return malformed_.load(std::memory_order_relaxed); }

 private:
  Transport* t_;
  std::vector<Packet> packets_;  // receiver thread: Poll's buffer
  // Receiver thread: for each message handed out and not yet released, the packets to release
  // with it (itself and the refused ones just before it); then the refused ones after the last.
  std::vector<uint32_t> held_;
  size_t held_first_ = 0;
  uint32_t trailing_ = 0;
  std::atomic<uint64_t> malformed_{0};
};

// A batch polled from a Wire, handled one message at a time in order; a message that must wait
// (for a send slot, say) stays first, and the batch is released once every message is handled.
// The polling thread's.
class Inbox {
 public:
  // The next message to handle, polling `w` when the batch is done (null: nothing came).
  const Message* Next(Wire& w) {
    if (next_ == polled_) {
      if (polled_) w.Release(polled_);
      next_ = polled_ = 0;
      polled_ = w.Poll(batch_, kBatch);
      if (polled_ == 0) return nullptr;
    }
    return &batch_[next_];
  }
  void Handled() { ++next_; }

 private:
  static constexpr size_t kBatch = 32;
  Message batch_[kBatch];
  size_t polled_ = 0, next_ = 0;
};

}  // namespace hogstream
