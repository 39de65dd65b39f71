// UDP "device": the settings of a UDP job and the endpoints it opens (one socket per
// endpoint, bound at Open, plus one per multicast group it joins). Set-up never blocks: Open
// binds at once (a bind failure is a one-line Error), peers and groups are added by address.
// Not for: addresses outside what the caller gives (no discovery here; the group layer's
// join messages will carry addresses later).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "transport/frame.hpp"
#include "transport/transport.hpp"

namespace hogstream {

// The largest UDP payload (a multiple of 16) whose frame fits one datagram within `mtu`, so
// nothing is fragmented: IPv4 + UDP headers (28 bytes), the frame header and its trailer (32
// bytes keyed, 8 not), padded to 16. At most 32 KiB (loopback's MTU is 64 KiB); 8 KiB when
// the MTU is unknown (0). The udp default of OpenOptions::max_payload.
uint32_t UdpPayloadFor(uint32_t mtu, bool keyed);

struct UdpOptions {
  std::string address = "127.0.0.1";  // the local IPv4 address to bind (and to send multicast from)
  uint16_t port = 0;                  // 0: the kernel picks one (UdpEndpoint::port() tells)
  uint32_t max_payload = 32768;       // bytes; payload + frame overhead must fit one datagram
  uint32_t send_slots = 64;           // frames a sender may have committed and not yet sent
  uint32_t recv_slots = 64;           // frames a receiver may hold (polled, not released)
  uint32_t max_batch = 32;            // datagrams per sendmmsg / recvmmsg
  uint64_t job = 0;                   // frames of another job are counted and dropped
  std::optional<JobKey> key;          // --job-key: every frame carries a keyed MAC
  uint64_t pace_bytes_per_s = 0;      // sender rate limit on frame bytes; 0 = unpaced
  uint32_t heartbeat_ms = 50;         // a heartbeat to every peer at least this often; 0 = none and no peer timeout (the caller decides liveness)
  uint32_t peer_timeout_ms = 0;       // silence after which a heard peer is down; 0 = 10 heartbeats
  uint32_t rcvbuf_bytes = 0;          // socket receive buffer; 0 = derived (see endpoint.cpp)
  uint8_t multicast_ttl = 1;
  bool gso = true;                    // UDP GSO (UDP_SEGMENT) where the kernel has it
  bool gro = true;                    // UDP GRO (UDP_GRO) on receive where the kernel has it
  std::string netns;                  // `ip netns` name to make the sockets in; "" = the caller's own
};

class UdpDevice final {
 public:
  explicit UdpDevice(UdpOptions opt);
  // Binds a socket for peer `self` (never "not yet": bind does not wait). Errors are one line.
  std::unique_ptr<Transport> Open(PeerId self);
  const UdpOptions& options() const { return opt_; }
  // Peers 0 and 1 on 127.0.0.1 (kernel-chosen ports), each knowing the other: both ends of a
  // link in one process, for `hogstream bench --loopback` and tests.
  std::pair<std::unique_ptr<Transport>, std::unique_ptr<Transport>> LoopbackPair();

 private:
  UdpOptions opt_;
};

}  // namespace hogstream
