// Raw Ethernet endpoint: ONE AF_PACKET socket serves every peer and group of a job on one
// interface. A message is an Ethernet frame (dst MAC, our MAC, our ethertype) carrying one
// frame of transport/frame.hpp; peers are named by MAC, and a received frame's source is the
// peer whose MAC sent it (the frame's own claim is never trusted; unknown MACs are counted and
// dropped). Groups are broadcast or a locally administered group MAC (03:...), which bridges
// flood to every port (network.md §1.3.6).
// Not for: reliability (a lost frame is lost; the delta rule tolerates it), IP, frames larger
// than the interface MTU (no fragmentation: max_payload follows the MTU).
//
// Paths, chosen by measurement on a veth pair between two namespaces (this 2-vCPU machine,
// loaded by other builds; sender and receiver pinned apart; 2 s blasts of full-MTU frames, 64 per
// kick; a throwaway probe, 4 runs each, ranges given):
//   receive: a TPACKET_V3 ring. A V2 ring wakes the reader per frame (sk_data_ready per
//     packet, paid on the sending CPU on veth), V3 once per block:
//       MTU 1500: V3 0.62-0.66 Mpps (7.5-8.0 Gb/s)  vs V2 0.30-0.41 Mpps (3.6-4.9 Gb/s);
//       MTU 9000: V3 0.27-0.31 Mpps (20-22 Gb/s)    vs V2 0.18-0.21 Mpps (13-15 Gb/s).
//   send: sendmmsg from our own slots, not a TPACKET_V2 TX ring (V3 receiver, both zero-copy
//     fills):
//       MTU 1500: sendmmsg 0.62-0.66 Mpps vs TX ring 0.49-0.62 Mpps;
//       MTU 9000: sendmmsg 0.27-0.31 Mpps vs TX ring 0.25-0.31 Mpps (equal within noise),
//     and with sendmmsg what the kernel refuses stays queued in our slots with no ring-status
//     bookkeeping: no POLLOUT and no TX frame status are trusted, sendmmsg says what it took.
//   This endpoint end to end (checksums both sides, max payload, unpaced): MTU 1500
//     0.40-0.55 Mpps (4.6-6.3 Gb/s of payload); MTU 9000 0.18-0.21 Mpps (13-14 Gb/s), where the
//     receiver falls behind and the kernel drops (kernel_drops()): pace the sender.
// Latency: V3 hands a partly filled block to Poll only when its timer fires, so at low rates a
// frame waits up to recv_block_timeout_ms (1 ms by default) before Poll sees it.
// Set-up order (no race, network.md §1.3.4): socket(AF_PACKET, SOCK_RAW, 0) (protocol 0: no
// frames yet) -> PACKET_VERSION V3 -> PACKET_RX_RING -> mmap -> PACKET_IGNORE_OUTGOING ->
// bind(ifindex, ethertype). A frame that arrives before bind is not ours to miss.
//
// Alignment. Send slots hold [2 bytes unused][Ethernet header 14][frame]: the frame starts 16
// into a 64-aligned slot and the payload 64 in. Received payloads sit where the kernel put the
// packet: V3 packs packets at 8-byte steps, so the sender pads each Ethernet frame (after the
// trailer, up to 15 zero bytes the receiver ignores) to a length after which the receiver's next
// packet starts 16-aligned. A payload that still lands off 16 (a frame from elsewhere came
// first in the block) is copied into a bounce slot (realigned() counts them; 0 between two of
// ours). At the longest payload the pad is 0 or 1 byte, so the default max_payload is the largest
// multiple of 16 that leaves that byte (MTU 9000: 8944, not 8960; MaxPayload in endpoint.cpp).
//
// Receive ring bookkeeping: Poll reads blocks in ring order; each message handed out holds its
// block. A block goes back to the kernel once it is read through and every message in it is
// released (Release hands back the oldest first); a block with nothing handed out goes back as
// soon as it is read (frames not handed out: bad, unknown source, heartbeats). The kernel fills
// blocks in ring order and waits at one still held, dropping new frames meanwhile (counted:
// kernel_drops()), so a caller that holds messages long holds the link.
//
// Threads: as transport.hpp (one sender thread, one receiver thread). Set-up calls (AddPeer,
// AddGroup) come from the owner before either thread uses the endpoint.
// Liveness: as the UDP endpoint: heartbeats from Flush() / AcquireSend() at least every
// heartbeat_ms; Poll latches kPeerDown once a heard peer is silent for peer_timeout_ms, judged
// only when Poll has read the ring through (so a backlog of unread frames cannot make a live
// peer look dead). Heartbeats never reach the caller.
// Teardown: the destructor unmaps the ring and closes the socket; messages still held become
// invalid with it. Slots are ours, so any order of destroying endpoints is safe.
#pragma once

#include <sys/socket.h>
#include <sys/uio.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "transport/frame.hpp"
#include "transport/raw/device.hpp"
#include "transport/send_queue.hpp"
#include "transport/transport.hpp"

namespace hogstream {

class RawEndpoint final : public Transport {
 public:
  RawEndpoint(PeerId self, const RawOptions& opt);
  ~RawEndpoint() override;
  RawEndpoint(const RawEndpoint&) = delete;
  RawEndpoint& operator=(const RawEndpoint&) = delete;

  // Set-up (owner thread, before traffic). A group MAC as a peer, or one MAC for two peers, is a
  // one-line Error.
  void AddPeer(PeerId peer, const Mac& mac);
  // Sends to Dest::Group(group) go to `mac`: kBroadcastMac or a locally administered group
  // address (first octet with bits 0 and 1 set, e.g. 03:00:00:00:00:01; anything else is an
  // Error). With `join` this endpoint also receives the group (PACKET_ADD_MEMBERSHIP, so a NIC
  // that filters multicast lets it in); frames to groups not joined are ignored.
  void AddGroup(uint16_t group, const Mac& mac, bool join = true);

  const Mac& mac() const { return mac_; }  // the interface's MAC: what peers name us by
  uint32_t mtu() const { return mtu_; }
  // Any thread. Frames the kernel dropped for want of ring space (PACKET_STATISTICS tp_drops,
  // summed over the endpoint's life).
  uint64_t kernel_drops() const;
  // Any thread (receiver-thread counters). Frames from MACs that are no peer of ours; good
  // payloads copied to a bounce slot because they landed off 16 bytes.
  uint64_t unknown_sources() const { return unknown_sources_.load(std::memory_order_relaxed); }
  uint64_t realigned() const { return realigned_.load(std::memory_order_relaxed); }

  PeerId self() const override { return self_; }
  Caps caps() const override;
  std::byte* AcquireSend() override;
  void CommitSend(Dest to, uint32_t length) override;
  void Flush() override;
  size_t Poll(Packet* out, size_t max) override;
  void Release(size_t n) override;
  int wait_fd() const override { return fd_; }  // POLLIN once a ring block is ready

 private:
  struct Queued {
    uint32_t slot;
    uint32_t bytes;  // wire bytes: the Ethernet frame (header + frame + pad)
  };
  enum class Seen { kSkip, kDeliver, kStall };
  std::byte* SendSlot(uint32_t s) { return send_mem_.get() + size_t{s} * send_stride_; }
  std::byte* Bounce(uint32_t s) { return bounce_mem_.get() + size_t{s} * bounce_stride_; }
  std::byte* Block(uint32_t b) const { return ring_ + size_t{b} * opt_.recv_block_bytes; }
  // Writes the Ethernet header before a sealed frame at slot + 2 and zeroes the pad; returns
  // the wire bytes.
  uint32_t Frame(std::byte* slot, const Mac& to, size_t frame_bytes) const;
  void Heartbeats();                                    // sender thread
  void ReadKernelStats() const;                         // any thread
  Seen Examine(const std::byte* pkt, Packet* m, bool* bounced);  // receiver thread
  void FinishBlock();                                   // receiver thread
  void ReturnBlock(uint32_t b);                         // receiver thread

  const PeerId self_;
  RawOptions opt_;  // as given, with the ring geometry filled in when derived (0) at set-up
  const FrameFormat fmt_;
  int fd_ = -1, ifindex_ = 0;
  Mac mac_{};
  uint32_t mtu_ = 0;
  uint32_t max_payload_ = 0;
  size_t send_stride_ = 0, bounce_stride_ = 0;
  std::byte* ring_ = nullptr;  // the mmap'd RX ring: recv_blocks blocks of recv_block_bytes
  size_t ring_bytes_ = 0;
  std::map<PeerId, Mac> peers_;
  std::map<uint64_t, PeerId> by_mac_;  // a MAC packed in 48 bits -> the peer that owns it
  std::map<uint16_t, Mac> groups_;
  std::vector<uint64_t> joined_;       // group MACs we receive (packed)
  SlotMemory send_mem_{nullptr, nullptr}, bounce_mem_{nullptr, nullptr};

  // Sender thread. The queue: committed, not yet taken by the kernel; its pacer counts wire
  // bytes.
  SendQueue<Queued> sq_;
  Interval beat_;
  std::vector<::mmsghdr> send_msgs_;
  std::vector<::iovec> send_iov_;

  // Receiver thread. Held messages, oldest first, as a ring of records (block index, with
  // kBounced when the payload sits in a bounce slot); its capacity is the most packets the RX
  // ring can hold. Bounce slots are used and freed in the same order.
  uint32_t scan_block_ = 0;            // the block Poll reads next (or is reading)
  bool in_block_ = false;              // scan_block_ is handed to us and partly read
  uint32_t scan_left_ = 0;             // its packets not yet read
  const std::byte* scan_pkt_ = nullptr;  // the next of them
  std::vector<uint32_t> block_held_;   // per block: messages handed out, not yet released
  std::vector<uint8_t> block_read_;    // per block: read through, waiting for its releases
  std::vector<uint32_t> held_;
  size_t held_first_ = 0, held_count_ = 0;
  uint32_t bounce_slots_ = 0, bounce_first_ = 0, bounce_used_ = 0;
  Liveness live_{opt_.heartbeat_ms, opt_.peer_timeout_ms};
  Interval stats_;  // PACKET_STATISTICS read in Poll at least every heartbeat_ms
  std::atomic<uint64_t> unknown_sources_{0}, realigned_{0};
  mutable std::atomic<uint64_t> kernel_drops_{0};
};

}  // namespace hogstream
