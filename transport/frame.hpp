// What one message looks like on a wire (udp/, raw/, verbs/): a fixed 48-byte header, the
// payload in place, and a trailer: an XXH3-64 checksum, or with a job key a MAC that also
// authenticates the sender as one of the job: a 16-byte nonce, unique per frame (8 random
// bytes per FrameFormat, then a counter), and the 16-byte Poly1305 tag of XChaCha20-Poly1305
// (libsodium's IETF AEAD) with the frame's bytes as associated data and no message: one
// ChaCha20 block for the one-time key, then Poly1305 over the frame, several times faster than
// a keyed BLAKE2b (whose cost was 12-20% of a 2-machine LeNet job's speed on two cores).
// Not for: the in-process transport (no bytes leave the process).
//
// Layout (little-endian; the payload starts at byte 32, so a slot aligned to 16 stays aligned):
//    0 magic u32 'HSF1'   4 version u8   5 type u8 (FrameType)   6 zero u8   7 flags u8 (bit 0: keyed)
//    8 job u64           16 source u16  18 zero u16  20 length u32 (payload bytes)  24 zero u64
//   32 payload[length]   then the trailer over bytes [0, 32+length): 8 bytes (XXH3), or keyed
//                        32: nonce[16] (the AEAD's 24-byte nonce, zero-extended), tag[16]
// The payload is the sender's bytes, never read here (sync/wire.hpp says what sync puts there).
//
// Parse never trusts the bytes: anything not exactly a frame of this job and version is
// answered with a Reject reason (the caller counts it per reason and drops it), never applied,
// never a crash. Thread-safe: Seal and Parse may be called from any threads (the nonce counter
// is atomic; a copy draws its own random prefix, so no two formats share nonces).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "transport/transport.hpp"

namespace hogstream {

// The secret behind --job-key=FILE: the BLAKE2b hash of the file's bytes (any length > 0).
using JobKey = std::array<uint8_t, 32>;
// The job id frames carry, from the job's name (--job; by default its --peers list): its
// Digest64 (base/hash.hpp), so that every build and tool derives the same number.
uint64_t JobIdOf(const std::string& name);
// Reads FILE into a JobKey. A missing, unreadable or empty file is a user Error.
JobKey LoadJobKey(const std::string& path);

// What a frame is to the transports themselves: a caller's payload, or a transport's own
// liveness beat (no payload; never handed to the caller).
enum class FrameType : uint8_t { kData = 1, kHeartbeat = 2 };

// A frame's header as the transport reads it: its type, who sent it, its payload's length.
struct FrameHeader {
  FrameType type = FrameType::kData;
  PeerId source = kNoPeer;
  uint32_t length = 0;
};

class FrameFormat {
 public:
  static constexpr uint32_t kMagic = 0x31465348;  // "HSF1" read as little-endian bytes
  // 3: opaque payloads (sync's words moved into them, sync/wire.hpp); 4: a control message
  // carries its machine's solver count (sync/net_control.hpp), so builds that differ never mix.
  static constexpr uint8_t kVersion = 4;
  static constexpr size_t kHeaderBytes = 32;
  static constexpr size_t kLengthAt = 20;  // where the payload's length (u32) is in the header

  // `job` tells jobs apart on a shared wire; `key` (optional) makes every frame carry a MAC.
  explicit FrameFormat(uint64_t job, std::optional<JobKey> key = std::nullopt);
  FrameFormat(const FrameFormat& other);
  FrameFormat& operator=(const FrameFormat&) = delete;

  uint64_t job() const { return job_; }
  bool keyed() const { return key_.has_value(); }
  // A keyed frame's trailer is its nonce and tag; an unkeyed one's a checksum.
  static constexpr size_t TrailerBytes(bool keyed) { return keyed ? 32 : 8; }
  size_t trailer_bytes() const { return TrailerBytes(keyed()); }
  // Bytes a frame adds to its payload.
  size_t overhead() const { return kHeaderBytes + trailer_bytes(); }

  // Writes the header and trailer around a payload already in place at frame + kHeaderBytes
  // (h.length bytes). The buffer holds h.length + overhead() bytes. Returns the frame's size.
  size_t Seal(std::byte* frame, const FrameHeader& h) const;

  // The bytes of the frame at `frame` without the padding our senders may put after its trailer
  // (up to 15 bytes, so the next frame of a run stays 16-aligned): `bytes` trimmed where the
  // frame's length field says it ends, or `bytes` unchanged when that field says otherwise
  // (Parse then refuses it like any bad length).
  size_t Unpadded(const std::byte* frame, size_t bytes) const;

  // Checks `bytes` bytes at `frame`. nullopt: a good frame; *h and *payload (pointing into the
  // frame) are set. Otherwise why it was refused; *h and *payload are untouched.
  std::optional<Reject> Parse(const std::byte* frame, size_t bytes, uint32_t max_payload, FrameHeader* h,
                              const std::byte** payload) const;

 private:
  uint64_t job_;
  std::optional<JobKey> key_;
  uint64_t prefix_ = 0;                          // keyed: this format's random half of each nonce
  mutable std::atomic<uint64_t> counter_{0};     // keyed: the other half, one per frame sealed
};

}  // namespace hogstream
