// The one interface a sync segment uses to talk to its peer: non-blocking, slot-based message
// passing of (kind, chunk, seq, floats). Every link implements it: in-process queues now;
// /dev/shm, raw Ethernet, UDP and RDMA verbs later. The delta rule (sync/segment.hpp) sees only
// this, never a socket. Not for: connection set-up, framing, checksums (a backend's business).
//
// Memory: the transport owns a fixed set of preallocated payload slots, each max_payload()
// floats. A sender asks for a free slot (AcquireSend), writes the payload in place, and commits
// it (CommitSend); a receiver gets a view of a slot (Poll) and hands it back (Release). Nothing
// is allocated per message, and the slave writes its delta straight into the outgoing slot.
//
// Threads: an endpoint has ONE sender thread (AcquireSend, CommitSend, PostSend) and ONE
// receiver thread (Poll, Release); they may be the same thread. The two endpoints of a link may
// be on different threads or processes. Nothing here blocks: "no room" and "nothing yet" are
// ordinary results, and the caller tries again later.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/common.hpp"

namespace hogstream {

enum class MsgKind : uint8_t {
  kPosition = 1,  // master -> slave: the master's current values of one chunk
  kDelta = 2,     // slave -> master: the slave's progress on that chunk, answering a position
};

struct Message {
  MsgKind kind = MsgKind::kPosition;
  uint32_t chunk = 0;        // chunk index in the flat buffer
  uint64_t seq = 0;          // per-chunk sequence number, set by the master, echoed by the slave
  uint32_t length = 0;       // floats in payload
  const float* payload = nullptr;
};

class Transport {
 public:
  virtual ~Transport() = default;

  // Any thread. Largest payload, in floats, one message can carry.
  virtual uint32_t max_payload() const = 0;

  // Sender thread. A free slot of max_payload() floats to fill, or nullptr when every slot is in
  // flight. Calling it again before CommitSend returns the same slot (abandoning is free).
  virtual float* AcquireSend() = 0;
  // Sender thread. Sends the slot from AcquireSend with its first `length` floats as payload.
  virtual void CommitSend(MsgKind kind, uint32_t chunk, uint64_t seq, uint32_t length) = 0;
  // Sender thread. AcquireSend + copy + CommitSend; false = no free slot, nothing sent.
  // A message longer than max_payload() is a Bug, raised before anything is copied.
  bool PostSend(const Message& m) {
    HS_CHECK_LE(m.length, max_payload()) << "PostSend: message longer than a slot";
    float* slot = AcquireSend();
    if (!slot) return false;
    std::memcpy(slot, m.payload, sizeof(float) * m.length);
    CommitSend(m.kind, m.chunk, m.seq, m.length);
    return true;
  }

  // Receiver thread. Non-blocking: false = nothing waiting. On true, *out views a slot that
  // stays valid until Release(); hold at most one message at a time (Release before next Poll).
  virtual bool Poll(Message* out) = 0;
  // Receiver thread. Returns the slot of the message last returned by Poll to the sender.
  virtual void Release() = 0;
};

}  // namespace hogstream
