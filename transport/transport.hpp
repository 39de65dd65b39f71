// The one interface sync/ uses to move messages between peers: non-blocking, zero-copy slots,
// batched. Every backend implements it (transport/inproc/ in one process; udp/, raw/, verbs/
// over wires); the delta rule (sync/segment.hpp) sees only this, never a socket.
// A message is opaque bytes: a transport knows peers, slots, frames, the job's id and MAC, never
// what a payload means (sync/wire.hpp puts sync's own header at its start).
// Not for: framing, checksums, addresses, sockets (each backend's own files), fault injection
// (transport/fault/ wraps any backend).
//
// Model. A Device makes endpoints (a Transport); one endpoint serves every peer of a job. A
// send names a destination, a peer or a multicast group; a received message names its source
// peer. Each endpoint owns a fixed set of send slots and receive slots, preallocated: nothing
// is allocated per message, and the slave writes its delta straight into an outgoing slot.
//
// Threads: an endpoint has ONE sender thread (AcquireSend, CommitSend, PostSend, Flush) and ONE
// receiver thread (Poll, Release); they may be the same thread. status(), caps(), counters()
// and wait_fd() may be called from any thread. The peers may be threads, processes or hosts.
//
// Non-blocking contract (the NCCL net plugin's): no method blocks or sleeps. "No slot", "nothing
// yet" and "not ready yet" are ordinary answers (nullptr, 0, false), and the caller tries again
// later, typically after poll()ing wait_fd(). A failure that will not go away by retrying (a
// peer down, an I/O error) latches in status(); the methods then keep answering "nothing".
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/common.hpp"
#include "base/hash.hpp"

namespace hogstream {

using PeerId = uint16_t;
constexpr PeerId kNoPeer = 0xffff;

// A received message: who sent it and its payload, valid until its Release. The bytes are the
// caller's: a transport never reads them (sync/ puts its own small header first, sync/wire.hpp).
struct Packet {
  PeerId source = kNoPeer;  // set by the transport: the peer that sent it (never what it claims)
  uint32_t length = 0;      // payload bytes
  const std::byte* payload = nullptr;  // caps().alignment-aligned
};

// Where a send goes: one peer, or every member of a multicast group.
struct Dest {
  static Dest Peer(PeerId p) { return {false, p}; }
  static Dest Group(uint16_t g) { return {true, g}; }
  bool group = false;
  uint16_t id = 0;
};

enum class MemoryKind : uint8_t { kHost = 1, kPinned = 2, kDevice = 4 };

// What an endpoint can do, fixed once it exists.
struct Caps {
  uint32_t max_payload = 0;   // bytes one message can carry
  uint32_t alignment = 16;    // every payload (sent or received) starts on this many bytes, >= 16
  uint32_t send_slots = 0;    // slots a sender may have in flight
  uint32_t max_batch = 0;     // most messages one Poll returns (and one Flush moves at once)
  bool multicast = false;     // Dest::Group reaches several peers in one send
  uint8_t memory = static_cast<uint8_t>(MemoryKind::kHost);  // MemoryKind bits Register accepts
};

// Latched: once not kOk it stays so (the daemon reads it, reports and tears down).
struct Status {
  enum Code : uint8_t { kOk = 0, kPeerDown, kIoError } code = kOk;
  PeerId peer = kNoPeer;  // kPeerDown: which
  std::string what;       // one line for the user
  bool ok() const { return code == kOk; }
};

// Why a received frame was refused (transport/frame.hpp parses; every backend counts).
enum class Reject : uint8_t {
  kShort = 0,    // shorter than a frame header
  kMagic,        // not one of ours at all
  kVersion,      // a wire version we do not speak
  kJob,          // another job's frame (its job id, or keyed where we are not, or back)
  kChecksum,     // corrupt (XXH3 mismatch)
  kMac,          // keyed MAC mismatch: another key, a forgery, or corrupt
  kLength,       // header length disagrees with the bytes received, or over max_payload
  kHeader,       // a field out of range (unknown frame type, reserved bytes not zero)
  kSender,       // not from a peer of the job (by the wire's source address), or claiming another
  kCount
};
const char* RejectName(Reject r);

// Snapshot of an endpoint's counters. `injected_*` come from a fault decorator (zero otherwise).
struct TransportCounters {
  uint64_t sent = 0;            // messages committed
  uint64_t received = 0;        // messages handed out by Poll
  uint64_t bytes_sent = 0, bytes_received = 0;  // payload bytes
  uint64_t send_full = 0;       // AcquireSend answered "no slot"
  uint64_t kernel_dropped = 0;  // datagrams the kernel dropped before we could read them (buffer full)
  uint64_t dropped = 0, duplicated = 0, reordered = 0, delayed = 0;  // injected faults
  std::array<uint64_t, static_cast<size_t>(Reject::kCount)> rejected{};  // per reason
  uint64_t rejected_total() const {
    uint64_t s = 0;
    for (uint64_t r : rejected) s += r;
    return s;
  }
};

// One peer's traffic through an endpoint, by the peer's id (what the wire says sent it, never
// what a frame claims). Kept for peers below kTalliedPeers; others count in the totals only.
inline constexpr size_t kTalliedPeers = 256;
struct PeerCounters {
  PeerId peer = kNoPeer;
  uint64_t sent = 0, bytes_sent = 0;          // messages committed to it alone (a group send counts for none)
  uint64_t dropped = 0;                       // ... of which a fault decorator dropped
  uint64_t received = 0, bytes_received = 0;  // messages from it handed out by Poll
  std::array<uint64_t, static_cast<size_t>(Reject::kCount)> rejected{};  // its frames refused, per reason
  uint64_t rejected_total() const {
    uint64_t s = 0;
    for (uint64_t r : rejected) s += r;
    return s;
  }
};

class Transport {
 public:
  virtual ~Transport() = default;

  // Any thread. This endpoint's own peer id.
  virtual PeerId self() const = 0;
  // Any thread. Fixed for the endpoint's life.
  virtual Caps caps() const = 0;

  // ---- sender thread
  // A free slot of caps().max_payload bytes (aligned to caps().alignment) to fill, or nullptr
  // when every slot is in flight (counted in send_full). Calling it again before CommitSend
  // or Flush returns the same slot: abandoning a filled slot is free.
  virtual std::byte* AcquireSend() = 0;
  // Queues the slot from AcquireSend with `length` bytes of payload for `to`. It may leave at
  // once or only at the next Flush(). length > max_payload, or no slot acquired, is a Bug.
  virtual void CommitSend(Dest to, uint32_t length) = 0;
  // Hands what was committed to the wire (one sendmmsg, one doorbell). Never blocks: what the
  // kernel or NIC will not take now stays queued, and goes at a later Flush. A slot acquired
  // and not committed is abandoned: the caller must not write it after Flush.
  virtual void Flush() = 0;
  // AcquireSend + copy + CommitSend (no Flush); false = no free slot, nothing sent. A payload
  // longer than max_payload is a Bug, raised before anything is copied.
  bool PostSend(Dest to, const void* payload, uint32_t length) {
    HS_CHECK_LE(length, caps().max_payload) << "PostSend: message longer than a slot";
    std::byte* slot = AcquireSend();
    if (!slot) return false;
    if (length) std::memcpy(slot, payload, length);  // an empty payload may come as nullptr
    CommitSend(to, length);
    return true;
  }

  // ---- receiver thread
  // Up to `max` messages received since the last Poll, oldest first, into out[0..n); 0 =
  // nothing waiting. Each stays valid until released. Messages already held count against the
  // receive slots: an endpoint whose caller holds everything returns 0 until Release.
  virtual size_t Poll(Packet* out, size_t max) = 0;
  // Hands back the oldest n messages still held (their slots go back to the wire).
  virtual void Release(size_t n) = 0;

  // ---- any thread
  // The latched status: kOk, or the first peer-down / I/O error seen (Latch). Decorators and
  // backends that keep it elsewhere override it.
  virtual Status status() const;
  // A file descriptor that poll() reports readable when Poll may have something (or a peer
  // went down): the daemon sleeps on it when idle. -1: this backend has none; poll Poll.
  virtual int wait_fd() const { return -1; }
  // What a loop with nothing to do calls: sleeps until Poll may have something (wait_fd
  // readable) or `most` passes; a backend with no wait_fd sleeps `no_fd` instead (0: yields).
  void Idle(std::chrono::milliseconds most, std::chrono::microseconds no_fd) const;
  virtual TransportCounters counters() const { return counters_.Snapshot(); }
  // Per peer (PeerCounters), every peer with a count, by id. Decorators merge their inner
  // transport's.
  virtual std::vector<PeerCounters> peer_counters() const { return counters_.PeerSnapshot(); }

  // Memory registration (verbs, GPUDirect): makes [p, p + bytes) of `kind` usable as a
  // source/target of this endpoint. Host memory needs nothing; another kind this backend does
  // not have (see caps().memory) is a user Error.
  virtual void Register(const void* p, size_t bytes, MemoryKind kind) {
    HS_REQUIRE(caps().memory & static_cast<uint8_t>(kind))
        << "this transport cannot use " << (kind == MemoryKind::kDevice ? "device" : "pinned")
        << " memory";
  }
  virtual void Deregister(const void* p) {}

  // A new machine joining a running job: a frame that passed every check (the job's id, and
  // its MAC where the job has a key) but came from an address of no known peer, claiming to be
  // peer `claimed` (not this endpoint, nor a known peer), is offered to `admit` with its
  // address as a job's list writes it (e.g. "udp://10.0.0.5:7000"); true makes that address the
  // peer's from then on (received and sent to).
  // Only where one thread both sends and receives (a job's daemon): it is called from Poll.
  // Default: backends that cannot learn an address at run time never call it.
  using AdmitFn = std::function<bool(PeerId claimed, const std::string& address)>;
  virtual void set_admit(AdmitFn admit) { (void)admit; }

 protected:
  // Counters: each written by one thread (sender or receiver, as named), read by any, so a
  // relaxed load + store (no locked add) is enough.
  struct Counters {
    std::atomic<uint64_t> sent{0}, bytes_sent{0}, send_full{0};      // sender thread
    std::atomic<uint64_t> received{0}, bytes_received{0};            // receiver thread
    std::atomic<uint64_t> dropped{0}, duplicated{0}, reordered{0}, delayed{0};  // sender thread
    std::array<std::atomic<uint64_t>, static_cast<size_t>(Reject::kCount)> rejected{};  // receiver
    std::atomic<uint64_t> kernel_dropped{0};                                             // receiver
    // Per peer id below kTalliedPeers: sent, bytes_sent, dropped (sender thread); received,
    // bytes_received, rejected (receiver thread).
    struct Peer {
      std::atomic<uint64_t> sent{0}, bytes_sent{0}, dropped{0}, received{0}, bytes_received{0};
      std::array<std::atomic<uint64_t>, static_cast<size_t>(Reject::kCount)> rejected{};
    };
    std::unique_ptr<Peer[]> peers{new Peer[kTalliedPeers]};
    Peer* peer(PeerId p) const { return p < kTalliedPeers ? &peers[p] : nullptr; }
    TransportCounters Snapshot() const;
    std::vector<PeerCounters> PeerSnapshot() const;
  };
  static void Bump(std::atomic<uint64_t>& c, uint64_t v = 1) {
    c.store(c.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);
  }
  // Receiver thread: whether a good frame claims the peer whose address (MAC, queue pair) sent
  // it; if not, it is counted as Reject::kSender and must be dropped.
  bool ClaimMatches(PeerId claimed, PeerId wire) {
    if (claimed == wire) return true;
    Refuse(Reject::kSender, wire);
    return false;
  }
  // Receiver thread: counts a frame refused for `why`, in the peer's counts too where the wire
  // says which peer sent it (kNoPeer: an address of no peer, or not known).
  void Refuse(Reject why, PeerId wire = kNoPeer) {
    Bump(counters_.rejected[static_cast<size_t>(why)]);
    if (Counters::Peer* p = counters_.peer(wire)) Bump(p->rejected[static_cast<size_t>(why)]);
  }
  Counters counters_;

  // Sender thread: counts one message committed to `to` (and its payload bytes).
  void CountSent(Dest to, uint32_t length) {
    Bump(counters_.sent);
    Bump(counters_.bytes_sent, length);
    if (Counters::Peer* p = to.group ? nullptr : counters_.peer(to.id)) {
      Bump(p->sent);
      Bump(p->bytes_sent, length);
    }
  }
  // Receiver thread: counts the n messages a Poll hands out (messages and payload bytes).
  void CountReceived(const Packet* out, size_t n);
  // Receiver thread: latches kPeerDown for the first peer in `heard` (peer -> when last heard)
  // silent for longer than `timeout`, unless something is latched already. `backend` names the
  // transport in the message.
  void LatchSilentPeer(const std::map<PeerId, std::chrono::steady_clock::time_point>& heard,
                       std::chrono::milliseconds timeout, const char* backend);

  // Any thread. Latches `code` (not kOk) with its one-line `what`, unless something is latched
  // already: the first failure is the one reported.
  void Latch(Status::Code code, PeerId peer, const std::string& what);
  // Any thread, cheap: whether anything is latched.
  bool failed() const { return failed_.load(std::memory_order_acquire); }

 private:
  mutable std::mutex status_mu_;
  std::atomic<bool> failed_{false};
  Status status_;  // under status_mu_
};

}  // namespace hogstream
