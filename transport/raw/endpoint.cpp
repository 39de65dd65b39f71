// Raw Ethernet endpoint: the socket and its RX ring, frame layout and padding, the send queue
// and pacer, ring-block bookkeeping, heartbeats (see endpoint.hpp for the contract).
#include "transport/raw/endpoint.hpp"

#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "transport/netns.hpp"
#include "transport/send_queue.hpp"

namespace hogstream {

namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kEth = ETH_HLEN;  // dst MAC, src MAC, ethertype
// A send slot: [2 unused][Ethernet header][frame...]: the frame starts 16 in, its payload 64 in.
constexpr size_t kSlotEth = 2, kSlotFrame = kSlotEth + kEth;
static_assert(kSlotFrame % 16 == 0);
// Where the kernel puts a received packet's Ethernet header inside its V3 ring entry (net/packet
// af_packet.c, tpacket_rcv for SOCK_RAW: netoff = TPACKET_ALIGN(tp_hdrlen + max(maclen, 16)),
// macoff = netoff - maclen), and the 8-byte step between entries (V3_ALIGNMENT).
constexpr size_t kRxNet = TPACKET_ALIGN(TPACKET3_HDRLEN + 16);
constexpr size_t kRxMac = kRxNet - kEth;
constexpr size_t kRxStep = 8;
constexpr size_t kBlockHeader = 48;  // BLK_PLUS_PRIV(0): where a V3 block's first packet starts
static_assert(kRxNet % 16 == 0 && kBlockHeader % 16 == 0);
constexpr uint32_t kBounced = 0x80000000u;  // in a held record: the payload is in a bounce slot

size_t Up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// Zero bytes after a frame of `frame_bytes` so that the receiver's next ring entry starts on 16:
// an entry takes Up(kRxMac + wire, 8) bytes, and kRxMac + kEth = kRxNet is a multiple of 16.
size_t Pad(size_t frame_bytes) {
  size_t p = 0;
  while (Up(kRxNet + frame_bytes + p, kRxStep) % 16 != 0) ++p;
  return p;
}
size_t WireBytes(size_t frame_bytes) { return kEth + frame_bytes + Pad(frame_bytes); }

// The largest multiple of 16 whose frames, padded, fit the MTU. Frame + pad grows with the
// payload length, so the longest payload is the one to check.
uint32_t MaxPayload(uint32_t mtu, size_t overhead) {
  if (mtu < overhead + 16) return 0;
  size_t m = (mtu - overhead) / 16 * 16;
  while (m >= 16 && WireBytes(overhead + m) - kEth > mtu) m -= 16;
  return static_cast<uint32_t>(m);
}

uint64_t Pack(const void* mac) {
  uint64_t v = 0;
  std::memcpy(&v, mac, 6);
  return v;
}

bool IsPowerOfTwo(uint32_t v) { return v && !(v & (v - 1)); }

}  // namespace

RawEndpoint::RawEndpoint(PeerId self, const RawOptions& opt)
    : self_(self), opt_(opt), fmt_(opt.job, opt.key) {
  const std::string where = opt_.netns.empty() ? "" : " in network namespace '" + opt_.netns + "'";
  HS_REQUIRE(!opt_.iface.empty()) << "raw: no interface given (RawOptions::iface)";
  HS_REQUIRE(opt_.send_slots > 0 && opt_.max_batch > 0) << "raw: slots and batch must be > 0";
  HS_REQUIRE(opt_.heartbeat_ms > 0 || opt_.peer_timeout_ms == 0)
      << "raw: a peer timeout needs heartbeats (heartbeat_ms > 0)";
  HS_REQUIRE(opt_.recv_block_timeout_ms > 0) << "raw: recv_block_timeout_ms must be > 0";

  size_t max_wire = 0;  // the longest Ethernet frame we send
  try {
    // Everything that names the interface happens in its namespace; the socket stays there.
    NetnsScope in_ns(opt_.netns);
    fd_ = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);  // protocol 0: receives nothing yet
    if (fd_ < 0) {
      const int err = errno;
      HS_REQUIRE(err != EPERM && err != EACCES)
          << "raw Ethernet needs CAP_NET_RAW (run as root or `setcap cap_net_raw+ep` the program), "
             "or use --transport=udp";
      HS_FAIL() << "raw: socket(AF_PACKET): " << ErrnoText(err) << "; use --transport=udp";
    }
    ifreq ifr{};
    HS_REQUIRE(opt_.iface.size() < IFNAMSIZ) << "raw: no interface '" << opt_.iface << "'" << where;
    std::memcpy(ifr.ifr_name, opt_.iface.c_str(), opt_.iface.size() + 1);
    HS_REQUIRE(ioctl(fd_, SIOCGIFINDEX, &ifr) == 0) << "raw: no interface '" << opt_.iface << "'" << where;
    ifindex_ = ifr.ifr_ifindex;
    HS_REQUIRE(ioctl(fd_, SIOCGIFHWADDR, &ifr) == 0 && ifr.ifr_hwaddr.sa_family == ARPHRD_ETHER)
        << "raw: '" << opt_.iface << "'" << where << " is not an Ethernet interface";
    std::memcpy(mac_.data(), ifr.ifr_hwaddr.sa_data, 6);
    HS_CHECK(ioctl(fd_, SIOCGIFMTU, &ifr) == 0) << ErrnoText(errno);
    mtu_ = static_cast<uint32_t>(ifr.ifr_mtu);
    HS_CHECK(ioctl(fd_, SIOCGIFFLAGS, &ifr) == 0) << ErrnoText(errno);
    HS_REQUIRE(ifr.ifr_flags & IFF_UP) << "raw: interface '" << opt_.iface << "'" << where << " is down";

    const uint32_t most = MaxPayload(mtu_, fmt_.overhead());
    max_payload_ = opt_.max_payload ? opt_.max_payload : most;
    HS_REQUIRE(max_payload_ >= 16 && max_payload_ % 16 == 0)
        << "raw: max_payload " << max_payload_ << " must be a positive multiple of 16 bytes"
        << (most ? "" : " (the MTU " + std::to_string(mtu_) + " of '" + opt_.iface + "' carries none)");
    HS_REQUIRE(max_payload_ <= most) << "raw: max_payload " << max_payload_ << " does not fit the MTU " << mtu_
                                     << " of '" << opt_.iface << "' (at most " << most << " bytes)";
    max_wire = WireBytes(fmt_.overhead() + max_payload_);
    const size_t max_entry = Up(kRxMac + max_wire, kRxStep);
    const uint32_t page = static_cast<uint32_t>(sysconf(_SC_PAGESIZE));
    if (opt_.recv_block_bytes == 0) {  // the smallest block that holds 8 frames
      opt_.recv_block_bytes = page;
      while (opt_.recv_block_bytes < kBlockHeader + 8 * max_entry && opt_.recv_block_bytes < (1u << 20))
        opt_.recv_block_bytes *= 2;
    }
    if (opt_.recv_blocks == 0) opt_.recv_blocks = std::max<uint32_t>(8, (8u << 20) / opt_.recv_block_bytes);
    HS_REQUIRE(IsPowerOfTwo(opt_.recv_block_bytes) && opt_.recv_block_bytes % page == 0 &&
               opt_.recv_block_bytes <= (1u << 20))
        << "raw: recv_block_bytes " << opt_.recv_block_bytes
        << " must be a power of two, a multiple of the page size and at most 1 MiB";
    HS_REQUIRE(kBlockHeader + max_entry <= opt_.recv_block_bytes)
        << "raw: recv_block_bytes " << opt_.recv_block_bytes << " cannot hold one frame of " << max_wire << " bytes";

    // The RX ring, before bind: TPACKET_V3 blocks, frames packed at 8-byte steps.
    const int version = TPACKET_V3;
    HS_CHECK(setsockopt(fd_, SOL_PACKET, PACKET_VERSION, &version, sizeof version) == 0) << ErrnoText(errno);
    tpacket_req3 req{};
    req.tp_block_size = opt_.recv_block_bytes;
    req.tp_block_nr = opt_.recv_blocks;
    req.tp_frame_size = static_cast<unsigned>(Up(max_entry, TPACKET_ALIGNMENT));  // V3: only checked, not used
    req.tp_frame_nr = opt_.recv_block_bytes / req.tp_frame_size * opt_.recv_blocks;
    req.tp_retire_blk_tov = opt_.recv_block_timeout_ms;
    if (setsockopt(fd_, SOL_PACKET, PACKET_RX_RING, &req, sizeof req) != 0) {
      const int err = errno;
      HS_FAIL() << "raw: cannot make a " << opt_.recv_blocks << " x " << opt_.recv_block_bytes
                << " byte receive ring: " << ErrnoText(err);
    }
    ring_bytes_ = size_t{opt_.recv_block_bytes} * opt_.recv_blocks;
    void* ring = mmap(nullptr, ring_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd_, 0);
    if (ring == MAP_FAILED) {
      const int err = errno;
      HS_FAIL() << "raw: cannot map the receive ring (" << ring_bytes_ << " bytes): " << ErrnoText(err);
    }
    ring_ = static_cast<std::byte*>(ring);
    // Our own frames must not come back to us (a socket bound to one ethertype does not see
    // them anyway; PACKET_OUTGOING is filtered in Examine for kernels without this option).
    const int one = 1;
    setsockopt(fd_, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one);
    // Room for a full send queue in the socket's send buffer (root may exceed wmem_max).
    const int sndbuf = static_cast<int>(std::min<size_t>(size_t{1} << 30,
                                                         std::max<size_t>(size_t{4} << 20, 2 * size_t{opt_.send_slots} * max_wire)));
    if (setsockopt(fd_, SOL_SOCKET, SO_SNDBUFFORCE, &sndbuf, sizeof sndbuf) != 0)
      setsockopt(fd_, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
    sockaddr_ll me{};
    me.sll_family = AF_PACKET;
    me.sll_protocol = htons(opt_.ethertype);
    me.sll_ifindex = ifindex_;
    if (bind(fd_, reinterpret_cast<sockaddr*>(&me), sizeof me) != 0) {
      const int err = errno;
      HS_FAIL() << "raw: cannot bind to '" << opt_.iface << "'" << where << ": " << ErrnoText(err);
    }
  } catch (...) {
    if (ring_) munmap(ring_, ring_bytes_);
    if (fd_ >= 0) close(fd_);
    throw;
  }

  send_stride_ = Up(kSlotFrame + max_wire, kLine);
  send_mem_ = AllocSlots(send_stride_ * opt_.send_slots, kLine, /*zero=*/true);
  send_msgs_.resize(opt_.max_batch);
  send_iov_.resize(opt_.max_batch);

  // Held records: at most one per packet the ring can hold; the smallest message a peer can
  // hand us is a frame with no payload.
  const size_t min_entry = Up(kRxMac + kEth + fmt_.overhead(), kRxStep);
  held_.resize(size_t{opt_.recv_blocks} * ((opt_.recv_block_bytes - kBlockHeader) / min_entry + 1));
  block_held_.assign(opt_.recv_blocks, 0);
  block_read_.assign(opt_.recv_blocks, 0);
  bounce_slots_ = opt_.max_batch;
  bounce_stride_ = Up(max_payload_, kLine);
  bounce_mem_ = AllocSlots(bounce_stride_ * bounce_slots_, kLine);

  const auto now = Clock::now();
  // One full batch of the longest frames may go at once; the bucket holds a batch of slots.
  const double burst = static_cast<double>(send_stride_ * opt_.max_batch);
  sq_ = SendQueue<Queued>(opt_.send_slots,
                          Pacer(opt_.pace_bytes_per_s, burst, static_cast<double>(max_wire * opt_.max_batch), now));
  const std::chrono::milliseconds beat(opt_.heartbeat_ms);
  beat_ = Interval(beat, Clock::time_point{});  // the first Flush or AcquireSend beats at once
  stats_ = Interval(opt_.heartbeat_ms ? beat : std::chrono::milliseconds(50), now);
}

RawEndpoint::~RawEndpoint() {
  if (ring_) munmap(ring_, ring_bytes_);
  if (fd_ >= 0) close(fd_);
}

void RawEndpoint::AddPeer(PeerId peer, const Mac& mac) {
  HS_REQUIRE(!(mac[0] & 1)) << "raw: peer " << peer << "'s MAC " << FormatMac(mac) << " is a group address";
  const auto owner = by_mac_.find(Pack(mac.data()));
  HS_REQUIRE(owner == by_mac_.end() || owner->second == peer)
      << "raw: MAC " << FormatMac(mac) << " is already peer " << owner->second << ", cannot also be peer " << peer;
  const auto old = peers_.find(peer);
  if (old != peers_.end()) by_mac_.erase(Pack(old->second.data()));
  peers_[peer] = mac;
  by_mac_[Pack(mac.data())] = peer;
}

void RawEndpoint::AddGroup(uint16_t group, const Mac& mac, bool join) {
  HS_REQUIRE(mac == kBroadcastMac || (mac[0] & 3) == 3)
      << "raw: group MAC " << FormatMac(mac)
      << " must be ff:ff:ff:ff:ff:ff or a locally administered group address (first octet with bits 0 and 1 "
         "set, e.g. 03:00:00:00:00:01)";
  if (join) {
    if (mac != kBroadcastMac) {  // broadcast needs no membership
      packet_mreq mr{};
      mr.mr_ifindex = ifindex_;
      mr.mr_type = PACKET_MR_MULTICAST;
      mr.mr_alen = 6;
      std::memcpy(mr.mr_address, mac.data(), 6);
      if (setsockopt(fd_, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mr, sizeof mr) != 0) {
        const int err = errno;
        HS_FAIL() << "raw: cannot join group " << FormatMac(mac) << " on '" << opt_.iface << "': " << ErrnoText(err);
      }
    }
    const uint64_t packed = Pack(mac.data());
    if (std::find(joined_.begin(), joined_.end(), packed) == joined_.end()) joined_.push_back(packed);
  }
  groups_[group] = mac;
}

Caps RawEndpoint::caps() const {
  Caps c;
  c.max_payload = max_payload_;
  c.alignment = 16;  // send: slots 64-aligned, payload 64 in; receive: padded frames or a bounce
  c.send_slots = opt_.send_slots;
  c.max_batch = opt_.max_batch;
  c.multicast = true;
  return c;
}

void RawEndpoint::ReadKernelStats() const {
  // Reading resets the kernel's counts, so concurrent readers each add a disjoint part.
  tpacket_stats_v3 st{};
  socklen_t len = sizeof st;
  if (getsockopt(fd_, SOL_PACKET, PACKET_STATISTICS, &st, &len) == 0)
    kernel_drops_.fetch_add(st.tp_drops, std::memory_order_relaxed);
}

uint64_t RawEndpoint::kernel_drops() const {
  ReadKernelStats();
  return kernel_drops_.load(std::memory_order_relaxed);
}

// ---------------------------------------------------------------- sender thread

uint32_t RawEndpoint::Frame(std::byte* slot, const Mac& to, size_t frame_bytes) const {
  std::byte* eth = slot + kSlotEth;
  std::memcpy(eth, to.data(), 6);
  std::memcpy(eth + 6, mac_.data(), 6);
  const uint16_t type = htons(opt_.ethertype);
  std::memcpy(eth + 12, &type, 2);
  const size_t pad = Pad(frame_bytes);
  std::memset(slot + kSlotFrame + frame_bytes, 0, pad);
  return static_cast<uint32_t>(kEth + frame_bytes + pad);
}

std::byte* RawEndpoint::AcquireSend() {
  if (!sq_.acquired()) Heartbeats();
  const std::optional<uint32_t> s = sq_.Acquire();
  if (!s) Bump(counters_.send_full);  // every slot committed and not yet taken by the kernel: Flush
  return s ? SendSlot(*s) + kSlotFrame + FrameFormat::kHeaderBytes : nullptr;
}

void RawEndpoint::CommitSend(Dest to, uint32_t length) {
  const uint32_t s = sq_.acquired_slot();
  HS_CHECK_LE(length, max_payload_);
  const Mac& dst = RouteOf(peers_, groups_, to, "raw: no MAC for");
  const size_t frame = fmt_.Seal(SendSlot(s) + kSlotFrame, FrameHeader{FrameType::kData, self_, length});
  sq_.Commit({s, Frame(SendSlot(s), dst, frame)});
  CountSent(to, length);
}

void RawEndpoint::Flush() {
  Heartbeats();
  Pacer& pacer = sq_.pacer();
  pacer.Refill(Clock::now());
  while (sq_.waiting()) {
    size_t k = 0;
    double cost = 0;
    while (k < sq_.waiting() && k < opt_.max_batch) {
      const Queued& q = sq_.at(k);
      if (!pacer.Fits(cost + q.bytes)) break;
      cost += q.bytes;
      send_iov_[k] = {SendSlot(q.slot) + kSlotEth, q.bytes};
      send_msgs_[k] = {};
      send_msgs_[k].msg_hdr.msg_iov = &send_iov_[k];  // no address: the socket is bound to the interface
      send_msgs_[k].msg_hdr.msg_iovlen = 1;
      ++k;
    }
    if (k == 0) break;  // paced: wait for tokens
    const int sent = sendmmsg(fd_, send_msgs_.data(), static_cast<unsigned>(k), MSG_DONTWAIT);
    if (sent < 0) {
      const int err = errno;
      if (err == EAGAIN || err == EWOULDBLOCK || err == ENOBUFS || err == EINTR)
        break;  // the kernel or the device is full: this frame goes next time
      // Anything else (the interface went down or away, the MTU shrank) will not get better by
      // retrying: latch it, drop the frame, go on.
      Latch(Status::kIoError, kNoPeer, "raw: sendmmsg on '" + opt_.iface + "': " + ErrnoText(err));
      sq_.Dropped(1);
      continue;
    }
    sq_.Sent(static_cast<size_t>(sent));
    if (static_cast<size_t>(sent) < k) break;
  }
}

void RawEndpoint::Heartbeats() {
  if (opt_.heartbeat_ms == 0 || !beat_.Due(Clock::now())) return;  // 0: none (liveness is the caller's)
  alignas(kLine) std::byte slot[kSlotFrame + FrameFormat::kHeaderBytes + 16 + 16];
  const size_t frame = fmt_.Seal(slot + kSlotFrame, FrameHeader{FrameType::kHeartbeat, self_, 0});
  for (const auto& [peer, mac] : peers_) {  // best effort: a full socket skips one beat
    const uint32_t wire = Frame(slot, mac, frame);
    send(fd_, slot + kSlotEth, wire, MSG_DONTWAIT);
  }
}

// ---------------------------------------------------------------- receiver thread

RawEndpoint::Seen RawEndpoint::Examine(const std::byte* pkt, Packet* m, bool* bounced) {
  const auto* hdr = reinterpret_cast<const tpacket3_hdr*>(pkt);
  const auto* sll = reinterpret_cast<const sockaddr_ll*>(pkt + TPACKET_ALIGN(sizeof(tpacket3_hdr)));
  const bool group = sll->sll_pkttype == PACKET_BROADCAST || sll->sll_pkttype == PACKET_MULTICAST;
  // Our own outgoing frames, and frames to another host's MAC (a bridge floods unicast it has
  // not learned yet), are not ours.
  if (sll->sll_pkttype != PACKET_HOST && !group) return Seen::kSkip;
  const uint32_t snap = hdr->tp_snaplen;
  if (snap < kEth) {
    Refuse(Reject::kShort);
    return Seen::kSkip;
  }
  const std::byte* eth = pkt + hdr->tp_mac;
  if (group && std::find(joined_.begin(), joined_.end(), Pack(eth)) == joined_.end()) return Seen::kSkip;
  // The source is the MAC that sent the frame; whatever the frame claims is ignored.
  const auto peer = by_mac_.find(Pack(eth + 6));
  if (peer == by_mac_.end()) {
    Bump(unknown_sources_);
    Refuse(Reject::kSender);
    return Seen::kSkip;
  }
  const std::byte* frame = eth + kEth;
  std::optional<Reject> why;
  FrameHeader h;
  const std::byte* payload = nullptr;
  if (hdr->tp_len != snap) {
    why = Reject::kLength;  // cut at the ring's entry size: larger than any frame of ours
  } else {
    why = fmt_.Parse(frame, fmt_.Unpadded(frame, snap - kEth), max_payload_, &h, &payload);
  }
  if (why) {
    Refuse(*why, peer->second);
    return Seen::kSkip;
  }
  if (!ClaimMatches(h.source, peer->second)) return Seen::kSkip;  // another peer's frame from this MAC
  live_.Heard(peer->second, Clock::now());
  if (h.type == FrameType::kHeartbeat) return Seen::kSkip;  // liveness only
  if (reinterpret_cast<uintptr_t>(payload) % 16 != 0) {
    if (bounce_used_ == bounce_slots_) return Seen::kStall;  // read it again after a Release
    std::byte* copy = Bounce((bounce_first_ + bounce_used_++) % bounce_slots_);
    std::memcpy(copy, payload, h.length);
    payload = copy;
    *bounced = true;
    Bump(realigned_);
  }
  *m = Packet{peer->second, h.length, payload};
  return Seen::kDeliver;
}

void RawEndpoint::ReturnBlock(uint32_t b) {
  auto* desc = reinterpret_cast<tpacket_block_desc*>(Block(b));
  // Release: every read of the block happens before the kernel may write it again.
  __atomic_store_n(&desc->hdr.bh1.block_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
}

void RawEndpoint::FinishBlock() {
  const uint32_t b = scan_block_;
  in_block_ = false;
  scan_block_ = (b + 1) % opt_.recv_blocks;
  if (block_held_[b] == 0) {
    ReturnBlock(b);
  } else {
    block_read_[b] = 1;  // the last Release of its messages returns it
  }
}

size_t RawEndpoint::Poll(Packet* out, size_t max) {
  if (stats_.Due(Clock::now())) ReadKernelStats();
  size_t n = 0;
  bool drained = false;  // read through every block the kernel has handed over
  while (n < max) {
    if (!in_block_) {
      // The ring has come round to a block we read and still hold: nothing new can be behind it
      // (the kernel fills blocks in order and waits here). Not "drained": the kernel may be
      // dropping frames meanwhile, so silence proves nothing.
      if (block_read_[scan_block_]) break;
      auto* desc = reinterpret_cast<tpacket_block_desc*>(Block(scan_block_));
      if (!(__atomic_load_n(&desc->hdr.bh1.block_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER)) {
        drained = true;
        break;
      }
      in_block_ = true;
      scan_left_ = desc->hdr.bh1.num_pkts;
      HS_CHECK_LT(desc->hdr.bh1.offset_to_first_pkt, opt_.recv_block_bytes);
      scan_pkt_ = Block(scan_block_) + desc->hdr.bh1.offset_to_first_pkt;
    }
    if (scan_left_ == 0) {
      FinishBlock();
      continue;
    }
    bool bounced = false;
    const Seen seen = Examine(scan_pkt_, &out[n], &bounced);
    if (seen == Seen::kStall) break;
    scan_pkt_ += reinterpret_cast<const tpacket3_hdr*>(scan_pkt_)->tp_next_offset;
    --scan_left_;
    if (seen == Seen::kDeliver) {
      HS_CHECK_LT(held_count_, held_.size());
      held_[(held_first_ + held_count_++) % held_.size()] = scan_block_ | (bounced ? kBounced : 0);
      ++block_held_[scan_block_];
      ++n;
    }
  }
  if (in_block_ && scan_left_ == 0) FinishBlock();  // do not keep a read-through block from the kernel

  // Peer down: judged only with nothing left unread, so a backlog cannot fake silence.
  if (drained)
    LatchSilentPeer(live_.heard(), live_.timeout(), "raw");
  CountReceived(out, n);
  return n;
}

void RawEndpoint::Release(size_t n) {
  HS_CHECK_LE(n, held_count_) << "Release of more messages than Poll handed out";
  for (; n > 0; --n) {
    const uint32_t rec = held_[held_first_];
    held_first_ = (held_first_ + 1) % held_.size();
    --held_count_;
    if (rec & kBounced) {
      bounce_first_ = (bounce_first_ + 1) % bounce_slots_;
      --bounce_used_;
    }
    const uint32_t b = rec & ~kBounced;
    if (--block_held_[b] == 0 && block_read_[b]) {
      block_read_[b] = 0;
      ReturnBlock(b);
    }
  }
}

}  // namespace hogstream
