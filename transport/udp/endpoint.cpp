// UDP endpoint: sockets, buffer sizing, the send queue and pacer, the receive ring, heartbeats
// (see endpoint.hpp for the contract).
#include "transport/udp/endpoint.hpp"

#include <arpa/inet.h>
#include <netinet/udp.h>
#include <errno.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "transport/netns.hpp"
#include "transport/send_queue.hpp"

namespace hogstream {

namespace {

constexpr size_t kMaxDatagram = 65507;  // IPv4 UDP payload limit
constexpr size_t kMaxGsoBytes = 65000;  // one GSO send is one IP packet before segmentation
constexpr size_t kMaxSegments = 64;     // UDP_MAX_SEGMENTS of older kernels
constexpr size_t kGroRun = 65536;       // a receive slot with GRO: the largest coalesced run

// Zero bytes after a frame's trailer so that the next frame of a coalesced run starts
// 16-aligned (the frame's length field says where the frame itself ends).
size_t Pad16(size_t bytes) { return (16 - bytes % 16) % 16; }

// UDP_GRO on a socket; false where the kernel lacks it (before 5.0).
bool EnableGro(int fd) {
  const int one = 1;
  return setsockopt(fd, SOL_UDP, UDP_GRO, &one, sizeof one) == 0;
}

using Clock = std::chrono::steady_clock;

sockaddr_in Addr(const std::string& ip, uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  HS_REQUIRE(inet_pton(AF_INET, ip.c_str(), &a.sin_addr) == 1) << "udp: '" << ip << "' is not an IPv4 address";
  return a;
}

bool Same(const sockaddr_in& a, const sockaddr_in& b) {
  return a.sin_addr.s_addr == b.sin_addr.s_addr && a.sin_port == b.sin_port;
}

// A receive buffer that holds a full burst: every receive slot's frame twice over (the kernel
// charges roughly twice a datagram's size for its skb), at least 4 MiB.
int DerivedRcvbuf(const UdpOptions& o, size_t frame_stride) {
  const size_t want = std::max<size_t>(size_t{4} << 20, 2 * size_t{o.recv_slots} * frame_stride);
  return static_cast<int>(std::min<size_t>(want, size_t{1} << 30));
}

// Root may exceed net.core.rmem_max (SO_RCVBUFFORCE); anyone else gets at most rmem_max.
void SizeRcvbuf(int fd, int bytes) {
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof bytes) != 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
}

int Rcvbuf(int fd) {
  int v = 0;
  socklen_t len = sizeof v;
  getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, &len);
  return v;
}

}  // namespace

UdpDevice::UdpDevice(UdpOptions opt) : opt_(std::move(opt)) {}

std::unique_ptr<Transport> UdpDevice::Open(PeerId self) { return std::make_unique<UdpEndpoint>(self, opt_); }

std::pair<std::unique_ptr<Transport>, std::unique_ptr<Transport>> UdpDevice::LoopbackPair() {
  UdpOptions o = opt_;
  o.address = "127.0.0.1";
  o.port = 0;
  auto a = std::make_unique<UdpEndpoint>(0, o), b = std::make_unique<UdpEndpoint>(1, o);
  a->AddPeer(1, "127.0.0.1", b->port());
  b->AddPeer(0, "127.0.0.1", a->port());
  return {std::move(a), std::move(b)};
}

UdpEndpoint::UdpEndpoint(PeerId self, const UdpOptions& opt)
    : self_(self),
      opt_(opt),
      fmt_(opt.job, opt.key),
      frame_stride_((opt.max_payload + fmt_.overhead() + kLine - 1) / kLine * kLine) {
  HS_REQUIRE(opt_.max_payload >= 16 && opt_.max_payload % 16 == 0)
      << "udp: max_payload must be a positive multiple of 16 bytes";
  const size_t most = (kMaxDatagram - fmt_.overhead()) / 16 * 16;
  HS_REQUIRE(opt_.max_payload <= most)
      << "udp: max_payload " << opt_.max_payload << " does not fit one datagram (at most " << most
      << " bytes)";
  HS_REQUIRE(opt_.send_slots > 0 && opt_.recv_slots > 0 && opt_.max_batch > 0)
      << "udp: slots and batch must be > 0";
  HS_REQUIRE(opt_.heartbeat_ms > 0 || opt_.peer_timeout_ms == 0)
      << "udp: a peer timeout needs heartbeats (heartbeat_ms > 0)";
  sockaddr_in me = Addr(opt_.address, opt_.port);
  {
    NetnsScope in_ns(opt_.netns);  // the socket stays in that namespace for good
    fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    HS_REQUIRE(fd_ >= 0) << "udp: socket: " << ErrnoText(errno);
    if (bind(fd_, reinterpret_cast<sockaddr*>(&me), sizeof me) != 0) {
      const int err = errno;
      close(fd_);
      HS_FAIL() << "udp: cannot bind " << opt_.address << ":" << opt_.port << ": " << ErrnoText(err);
    }
  }
  socklen_t len = sizeof me;
  getsockname(fd_, reinterpret_cast<sockaddr*>(&me), &len);
  port_ = ntohs(me.sin_port);
  me_ = me;
  SizeRcvbuf(fd_, opt_.rcvbuf_bytes ? static_cast<int>(opt_.rcvbuf_bytes) : DerivedRcvbuf(opt_, frame_stride_));
  rcvbuf_ = Rcvbuf(fd_);
  CountKernelDrops(fd_);
  // Multicast goes out of the bound address's interface (lo for 127.0.0.1) and loops back to
  // members on this host.
  in_addr mif = me.sin_addr;
  setsockopt(fd_, IPPROTO_IP, IP_MULTICAST_IF, &mif, sizeof mif);
  const unsigned char loop = 1, ttl = opt_.multicast_ttl;
  setsockopt(fd_, IPPROTO_IP, IP_MULTICAST_LOOP, &loop, sizeof loop);
  setsockopt(fd_, IPPROTO_IP, IP_MULTICAST_TTL, &ttl, sizeof ttl);

  epoll_ = epoll_create1(EPOLL_CLOEXEC);
  HS_REQUIRE(epoll_ >= 0) << "udp: epoll_create1: " << ErrnoText(errno);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = fd_;
  HS_CHECK(epoll_ctl(epoll_, EPOLL_CTL_ADD, fd_, &ev) == 0) << ErrnoText(errno);

  gro_ = opt_.gro && EnableGro(fd_);
  recv_stride_ = gro_ ? kGroRun : frame_stride_;
  send_mem_ = AllocSlots(frame_stride_ * opt_.send_slots, kLine);
  recv_mem_ = AllocSlots(recv_stride_ * opt_.recv_slots, kLine);
  ring_.resize(opt_.recv_slots);
  for (uint32_t s = 0; s < opt_.recv_slots; ++s) ring_[s] = s;
  msgs_.assign(opt_.recv_slots, 0);
  ready_.reserve(size_t{opt_.recv_slots} * (gro_ ? 16 : 1));
  send_msgs_.resize(opt_.max_batch);
  send_iov_.resize(opt_.send_slots);  // a batch can carry every queued frame (GSO runs)
  send_cmsg_.resize(opt_.max_batch);
  // UDP GSO where the kernel has it (Linux 4.18+): probe with a socket-wide size of 0 (off).
  const int no_segment = 0;
  gso_ = opt_.gso && setsockopt(fd_, SOL_UDP, UDP_SEGMENT, &no_segment, sizeof no_segment) == 0;
  recv_msgs_.resize(opt_.max_batch);
  recv_iov_.resize(opt_.max_batch);
  recv_from_.resize(opt_.max_batch);
  recv_cmsg_.resize(opt_.max_batch);
  const auto now = Clock::now();
  const double batch = static_cast<double>(frame_stride_ * opt_.max_batch);  // one full batch may go at once
  sq_ = SendQueue<Queued>(opt_.send_slots, Pacer(opt_.pace_bytes_per_s, batch, batch, now));
  beat_ = Interval(std::chrono::milliseconds(opt_.heartbeat_ms), now);
}

UdpEndpoint::~UdpEndpoint() {
  for (int fd : group_fds_) close(fd);
  if (epoll_ >= 0) close(epoll_);
  if (fd_ >= 0) close(fd_);
}

void UdpEndpoint::AddPeer(PeerId peer, const std::string& ip, uint16_t port) {
  peers_[peer] = Addr(ip, port);
}

void UdpEndpoint::CountKernelDrops(int fd) {
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_RXQ_OVFL, &one, sizeof one);  // (where refused: no count, nothing else)
  overflow_.push_back(0);
}

bool UdpEndpoint::AddGroup(uint16_t group, const std::string& ip, uint16_t port, bool join) {
  const sockaddr_in a = Addr(ip, port);
  HS_REQUIRE(IN_MULTICAST(ntohl(a.sin_addr.s_addr))) << "udp: " << ip << " is not a multicast address";
  if (join) {
    // Its own socket, bound to the group address: it receives that group and nothing else.
    int fd, err;
    {
      NetnsScope in_ns(opt_.netns);
      fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      err = errno;  // before leaving the namespace touches errno
    }
    HS_REQUIRE(fd >= 0) << "udp: socket: " << ErrnoText(err);
    const int one = 1, zero = 0;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // several members on one host
    // Default 1 delivers every group joined by ANY socket on this port (network.md §2.3).
    setsockopt(fd, IPPROTO_IP, IP_MULTICAST_ALL, &zero, sizeof zero);
    ip_mreqn req{};
    req.imr_multiaddr = a.sin_addr;
    req.imr_address = Addr(opt_.address, 0).sin_addr;
    if (bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0 ||
        setsockopt(fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &req, sizeof req) != 0) {
      close(fd);
      return false;
    }
    SizeRcvbuf(fd, opt_.rcvbuf_bytes ? static_cast<int>(opt_.rcvbuf_bytes) : DerivedRcvbuf(opt_, frame_stride_));
    if (gro_ && !EnableGro(fd)) {  // all our sockets alike: slots are sized for GRO runs or not
      close(fd);
      return false;
    }
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    HS_CHECK(epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &ev) == 0) << ErrnoText(errno);
    CountKernelDrops(fd);
    group_fds_.push_back(fd);
  }
  groups_[group] = a;
  return true;
}

Caps UdpEndpoint::caps() const {
  Caps c;
  c.max_payload = opt_.max_payload;
  c.alignment = 16;  // slots are cache-line aligned; the payload starts 48 bytes in
  c.send_slots = opt_.send_slots;
  c.max_batch = opt_.max_batch;
  c.multicast = true;
  return c;
}

// ---------------------------------------------------------------- sender thread

std::byte* UdpEndpoint::AcquireSend() {
  if (!sq_.acquired()) Heartbeats();
  const std::optional<uint32_t> s = sq_.Acquire();
  if (!s) Bump(counters_.send_full);  // every slot committed and not yet taken by the kernel: Flush
  return s ? SendSlot(*s) + FrameFormat::kHeaderBytes : nullptr;
}

void UdpEndpoint::CommitSend(Dest to, uint32_t length) {
  const uint32_t s = sq_.acquired_slot();
  HS_CHECK_LE(length, opt_.max_payload);
  const sockaddr_in& addr = RouteOf(peers_, groups_, to, "udp: no address for");
  size_t bytes = fmt_.Seal(SendSlot(s), FrameHeader{FrameType::kData, self_, length});
  const size_t pad = Pad16(bytes);
  std::memset(SendSlot(s) + bytes, 0, pad);
  bytes += pad;
  sq_.Commit({s, static_cast<uint32_t>(bytes), addr});
  CountSent(to, length);
}

void UdpEndpoint::Flush() {
  Heartbeats();
  Pacer& pacer = sq_.pacer();
  pacer.Refill(Clock::now());
  while (sq_.waiting()) {
    // The batch: up to max_batch datagrams. With GSO, one datagram entry carries a run of
    // frames to one destination, all of one size but the last (the kernel cuts them apart
    // again at gso_size; a receiver without UDP_GRO gets them one by one).
    size_t entries = 0, frames = 0;
    double cost = 0;
    run_frames_.clear();
    while (frames < sq_.waiting() && entries < opt_.max_batch) {
      const size_t first = frames;
      const Queued& q = sq_.at(first);
      if (!pacer.Fits(cost + q.bytes)) break;
      size_t run = 1, total = q.bytes;
      cost += q.bytes;
      while (gso_ && q.bytes < gso_too_big_ && first + run < sq_.waiting() && run < kMaxSegments) {
        const Queued& next = sq_.at(first + run);
        if (!Same(next.to, q.to) || next.bytes > q.bytes || sq_.at(first + run - 1).bytes != q.bytes ||
            total + next.bytes > kMaxGsoBytes || !pacer.Fits(cost + next.bytes))
          break;
        total += next.bytes;
        cost += next.bytes;
        ++run;
      }
      for (size_t i = 0; i < run; ++i)
        send_iov_[frames + i] = {SendSlot(sq_.at(first + i).slot), sq_.at(first + i).bytes};
      mmsghdr& m = send_msgs_[entries];
      m = {};
      m.msg_hdr.msg_name = const_cast<sockaddr_in*>(&q.to);
      m.msg_hdr.msg_namelen = sizeof(sockaddr_in);
      m.msg_hdr.msg_iov = &send_iov_[frames];
      m.msg_hdr.msg_iovlen = run;
      if (run > 1) {
        auto& buf = send_cmsg_[entries];
        m.msg_hdr.msg_control = buf.data();
        m.msg_hdr.msg_controllen = buf.size();
        cmsghdr* c = CMSG_FIRSTHDR(&m.msg_hdr);
        c->cmsg_level = SOL_UDP;
        c->cmsg_type = UDP_SEGMENT;
        c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
        const uint16_t seg = static_cast<uint16_t>(q.bytes);
        std::memcpy(CMSG_DATA(c), &seg, sizeof seg);
      }
      run_frames_.push_back(run);
      frames += run;
      ++entries;
    }
    if (entries == 0) break;  // paced: wait for tokens
    const int sent = sendmmsg(fd_, send_msgs_.data(), static_cast<unsigned>(entries), MSG_DONTWAIT);
    if (sent < 0) {
      const int err = errno;
      if (err == EAGAIN || err == EWOULDBLOCK || err == ENOBUFS || err == EINTR || err == ECONNREFUSED)
        break;  // the kernel is full, or reported an old ICMP error: this frame goes next time
      if (gso_ && err == EIO && run_frames_[0] > 1) {
        gso_ = false;  // the path cannot segment (as Tailscale found): plain datagrams from now
        continue;
      }
      if (gso_ && err == EMSGSIZE && run_frames_[0] > 1) {
        // Segments larger than the path MTU: frames this large go as plain datagrams (which IP
        // may fragment) from now; smaller ones keep GSO.
        gso_too_big_ = std::min<size_t>(gso_too_big_, send_iov_[0].iov_len);
        continue;
      }
      // Anything else will not get better by retrying: latch it, drop the frames, go on.
      Latch(Status::kIoError, kNoPeer, "udp: sendmmsg: " + ErrnoText(err));
      sq_.Dropped(run_frames_[0]);
      continue;
    }
    for (int e = 0; e < sent; ++e) {
      if (run_frames_[e] > 1) ++gso_sends_;
      sq_.Sent(run_frames_[e]);
    }
    if (static_cast<size_t>(sent) < entries) break;
  }
}

void UdpEndpoint::Heartbeats() {
  if (opt_.heartbeat_ms == 0 || !beat_.Due(Clock::now())) return;  // 0: none (liveness is the caller's)
  alignas(kLine) std::byte frame[FrameFormat::kHeaderBytes + 32]{};  // header, trailer, pad
  size_t bytes = fmt_.Seal(frame, FrameHeader{FrameType::kHeartbeat, self_, 0});
  bytes += Pad16(bytes);
  for (const auto& [peer, addr] : peers_)  // best effort: a full socket skips one beat
    sendto(fd_, frame, bytes, MSG_DONTWAIT, reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
}

// ---------------------------------------------------------------- receiver thread

size_t UdpEndpoint::Receive(int fd, size_t room) {
  const size_t R = ring_.size();
  const size_t k = std::min<size_t>(room, opt_.max_batch);
  for (size_t j = 0; j < k; ++j) {
    recv_iov_[j] = {RecvSlot(ring_[(first_ + held_ + j) % R]), recv_stride_};
    recv_msgs_[j] = {};
    recv_msgs_[j].msg_hdr.msg_name = &recv_from_[j];
    recv_msgs_[j].msg_hdr.msg_namelen = sizeof(sockaddr_in);
    recv_msgs_[j].msg_hdr.msg_iov = &recv_iov_[j];
    recv_msgs_[j].msg_hdr.msg_iovlen = 1;
    recv_msgs_[j].msg_hdr.msg_control = recv_cmsg_[j].data();
    recv_msgs_[j].msg_hdr.msg_controllen = recv_cmsg_[j].size();
  }
  const int got = recvmmsg(fd, recv_msgs_.data(), static_cast<unsigned>(k), MSG_DONTWAIT, nullptr);
  if (got <= 0) {
    const int err = errno;
    if (got < 0 && err != EAGAIN && err != EWOULDBLOCK && err != EINTR && err != ECONNREFUSED)
      Latch(Status::kIoError, kNoPeer, "udp: recvmmsg: " + ErrnoText(err));
    return 0;
  }
  // SO_RXQ_OVFL: each datagram carries the socket's count of datagrams dropped so far (its
  // receive buffer was full); the newest count of each socket, summed, is kernel_dropped.
  for (int j = 0; j < got; ++j) {
    msghdr& h = recv_msgs_[j].msg_hdr;
    for (cmsghdr* c = CMSG_FIRSTHDR(&h); c; c = CMSG_NXTHDR(&h, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SO_RXQ_OVFL) continue;
      uint32_t dropped = 0;
      std::memcpy(&dropped, CMSG_DATA(c), sizeof dropped);
      uint32_t& seen = overflow_[next_fd_];
      if (dropped > seen) {
        Bump(counters_.kernel_dropped, dropped - seen);
        seen = dropped;
      }
    }
  }
  return static_cast<size_t>(got);
}

size_t UdpEndpoint::Frames(size_t j, size_t pos, Clock::time_point now) {
  const mmsghdr& m = recv_msgs_[j];
  const std::byte* data = RecvSlot(ring_[pos]);
  const size_t total = m.msg_len;
  // A coalesced run: segments of `seg` bytes back to back, the last one possibly shorter.
  size_t seg = total;
  if (gro_) {
    for (cmsghdr* c = CMSG_FIRSTHDR(&m.msg_hdr); c; c = CMSG_NXTHDR(const_cast<msghdr*>(&m.msg_hdr), c)) {
      if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
        int v = 0;
        std::memcpy(&v, CMSG_DATA(c), sizeof v);
        if (v > 0) seg = static_cast<size_t>(v);
      }
    }
    if (seg < total) gro_runs_.store(gro_runs_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  // The source is who the datagram came from (its address and port), never what the frame
  // says: a datagram from an address that is not a peer's is refused unread, and so is a frame
  // whose claimed sender is another peer than the one whose address sent it.
  PeerId from = PeerAt(recv_from_[j]);
  if (total == 0) {  // an empty datagram: nothing of ours
    Refuse(Reject::kShort, from);
    return 0;
  }
  if (from == kNoPeer) {
    // Our own multicast sends come back (IP_MULTICAST_LOOP, for members on this host): not
    // ours to read, nor a stranger's to count. (Peers were matched first.)
    const sockaddr_in& src = recv_from_[j];
    const bool own = src.sin_port == me_.sin_port &&
                     (me_.sin_addr.s_addr == htonl(INADDR_ANY) || src.sin_addr.s_addr == me_.sin_addr.s_addr);
    if (own) return 0;
    // A stranger, unless a job admits it as a new machine (set_admit) on its first good frame.
    if (!admit_ || (from = Admit(src, data, std::min(seg, total))) == kNoPeer) {
      Refuse(Reject::kSender);
      return 0;
    }
  }
  size_t kept = 0;
  for (size_t off = 0; off < total; off += seg) {
    const std::byte* frame = data + off;
    size_t bytes = std::min(seg, total - off);
    std::optional<Reject> why;
    FrameHeader h;
    const std::byte* payload = nullptr;
    if (m.msg_hdr.msg_flags & MSG_TRUNC) {
      why = Reject::kLength;  // larger than any frame or run of ours
    } else {
      why = fmt_.Parse(frame, fmt_.Unpadded(frame, bytes), opt_.max_payload, &h, &payload);
    }
    if (why) {
      Refuse(*why, from);
      if (m.msg_hdr.msg_flags & MSG_TRUNC) break;
      continue;
    }
    if (reinterpret_cast<uintptr_t>(payload) % 16 != 0) {
      // Behind an unpadded frame in a coalesced run (a sender that does not pad): the caps
      // promise 16-aligned payloads, so it is counted and dropped, never handed out.
      Refuse(Reject::kLength, from);
      continue;
    }
    if (!ClaimMatches(h.source, from)) continue;
    live_.Heard(from, now);  // only a good frame from a peer's address says it is alive
    if (h.type == FrameType::kHeartbeat) continue;  // liveness only
    ready_.push_back(Packet{from, h.length, payload});
    ++kept;
  }
  return kept;
}

PeerId UdpEndpoint::PeerAt(const sockaddr_in& addr) const {
  for (const auto& [peer, a] : peers_)
    if (Same(a, addr)) return peer;
  return kNoPeer;
}

PeerId UdpEndpoint::Admit(const sockaddr_in& src, const std::byte* frame, size_t bytes) {
  FrameHeader h;
  const std::byte* payload = nullptr;
  if (fmt_.Parse(frame, fmt_.Unpadded(frame, bytes), opt_.max_payload, &h, &payload)) return kNoPeer;
  if (h.source == self_ || peers_.count(h.source)) return kNoPeer;  // (a known peer's rank from elsewhere: spoofed)
  char ip[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &src.sin_addr, ip, sizeof ip);
  if (!admit_(h.source, "udp://" + std::string(ip) + ":" + std::to_string(ntohs(src.sin_port)))) return kNoPeer;
  peers_[h.source] = src;
  return h.source;
}

void UdpEndpoint::Handout(Packet* out, size_t max, size_t* n) {
  while (*n < max && ready_head_ < ready_.size()) out[(*n)++] = ready_[ready_head_++];
  if (ready_head_ == ready_.size()) {
    ready_.clear();
    ready_head_ = 0;
  }
}

size_t UdpEndpoint::Poll(Packet* out, size_t max) {
  const auto now = Clock::now();
  LatchSilentPeer(live_.heard(), live_.timeout(), "udp");
  const size_t R = ring_.size();
  size_t n = 0;
  Handout(out, max, &n);  // frames of a run that did not fit the last call
  const size_t fds = 1 + group_fds_.size();
  for (size_t tried = 0; tried < fds && n < max && held_ < R;) {
    const int fd = next_fd_ == 0 ? fd_ : group_fds_[next_fd_ - 1];
    const size_t base = first_ + held_;  // ring position of the first datagram received
    // Without GRO a datagram is at most one frame: ask for no more than the caller takes.
    const size_t got = Receive(fd, gro_ ? R - held_ : std::min(max - n, R - held_));
    if (got == 0) {
      next_fd_ = (next_fd_ + 1) % fds;
      ++tried;
      continue;
    }
    for (size_t j = 0; j < got; ++j) {
      const size_t pos = (base + j) % R;
      const size_t kept = Frames(j, pos, now);
      if (kept == 0) continue;  // nothing to hand out: the slot is free again
      // Keep it: move its slot to the next held position (earlier drops leave holes).
      const size_t keep = (first_ + held_) % R;
      std::swap(ring_[keep], ring_[pos]);
      msgs_[keep] = static_cast<uint32_t>(kept);
      ++held_;
    }
    Handout(out, max, &n);
  }
  out_ += n;
  CountReceived(out, n);
  return n;
}

void UdpEndpoint::Release(size_t n) {
  HS_CHECK_LE(n, out_) << "Release of more messages than Poll handed out";
  out_ -= n;
  // Messages go back oldest first: the oldest held slots' counts run down in ring order.
  while (n > 0) {
    HS_CHECK_GT(held_, 0u);
    uint32_t& left = msgs_[first_];
    const uint32_t k = static_cast<uint32_t>(std::min<size_t>(n, left));
    left -= k;
    n -= k;
    if (left == 0) {
      first_ = (first_ + 1) % ring_.size();
      --held_;
    }
  }
}

}  // namespace hogstream
