// Raw Ethernet "device": the settings of a raw-Ethernet job (one interface, one ethertype) and
// the endpoints it opens, plus MAC address text. Set-up never blocks: Open makes the socket,
// its receive ring and binds at once (any failure is a one-line Error); peers and groups are
// then added by MAC on the endpoint (RawEndpoint::AddPeer / AddGroup).
// Needs CAP_NET_RAW (root, or `setcap cap_net_raw+ep` on the program); without it Open says so
// in one line and points at --transport=udp.
// Not for: discovery (MACs come from the caller; the group layer's join messages will carry
// them later), IP, routing beyond one Ethernet segment (bridges and switches forward frames;
// nothing routes them).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "transport/frame.hpp"
#include "transport/transport.hpp"

namespace hogstream {

using Mac = std::array<uint8_t, 6>;
// "0025908a56d8" or "00:25:90:8a:56:d8" (hex digits of either case). Anything else is a one-line
// Error naming the text.
Mac ParseMac(const std::string& text);
// "00:25:90:8a:56:d8".
std::string FormatMac(const Mac& mac);
constexpr Mac kBroadcastMac{0xff, 0xff, 0xff, 0xff, 0xff, 0xff};

struct RawOptions {
  std::string iface;                 // the Ethernet interface (required), in `netns` when set
  std::string netns;                 // `ip netns` name to open the socket in; "" = the caller's own
  uint16_t ethertype = 0x88B5;       // IEEE "local experimental 1"; other types never reach us
  uint32_t max_payload = 0;          // bytes, a multiple of 16; 0 = the most the MTU carries
  uint32_t send_slots = 64;          // frames a sender may have committed and not yet sent
  // One RX ring block: a power-of-two page multiple <= 1 MiB; 0 = the smallest that holds 8
  // frames of max_payload. A block reaches Poll when full or after recv_block_timeout_ms, so
  // small blocks keep a windowed exchange (positions out, deltas back) from waiting on the
  // timer: with 256 KiB blocks and 1.5 KB frames a window of 64 frames never filled one, and
  // the segment moved 64 frames per millisecond (bench/link_veth.sh, MTU 1500).
  uint32_t recv_block_bytes = 0;
  uint32_t recv_blocks = 0;          // blocks in the RX ring; 0 = 8 MiB of blocks (at least 8)
  uint32_t recv_block_timeout_ms = 1;  // a partly filled block reaches Poll after this long
  uint32_t max_batch = 64;           // frames per sendmmsg; most messages one Poll returns
  uint64_t job = 0;                  // frames of another job are counted and dropped
  std::optional<JobKey> key;         // --job-key: every frame carries a keyed MAC
  uint64_t pace_bytes_per_s = 0;     // sender rate limit on wire bytes; 0 = unpaced
  uint32_t heartbeat_ms = 50;        // a heartbeat to every peer at least this often; 0 = none and no peer timeout (the caller decides liveness)
  uint32_t peer_timeout_ms = 0;      // silence after which a heard peer is down; 0 = 10 heartbeats
};

class RawDevice final {
 public:
  explicit RawDevice(RawOptions opt);
  // The endpoint of peer `self` on opt.iface (a RawEndpoint; never "not yet"). Errors are one
  // line: no CAP_NET_RAW, no such interface or namespace, a max_payload the MTU cannot carry.
  std::unique_ptr<Transport> Open(PeerId self);
  const RawOptions& options() const { return opt_; }

 private:
  RawOptions opt_;
};

}  // namespace hogstream
