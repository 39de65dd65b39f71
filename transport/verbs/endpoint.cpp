// Verbs endpoint: queue pair set-up, the registered slots, batched posting with selective
// signalling, the receive queue and its completion channel, heartbeats (see endpoint.hpp).
#include "transport/verbs/endpoint.hpp"
#include "transport/send_queue.hpp"

#include <errno.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace hogstream {

namespace {

constexpr size_t kPage = 4096;
constexpr uint32_t kBeatRoom = 32;  // send work requests kept for heartbeats beyond the slots
constexpr int kPkeyIndex = 0;       // the default partition

using Clock = std::chrono::steady_clock;

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

// Page aligned (what registration pins is whole pages anyway), zeroed: nothing uninitialised
// ever goes on a wire.
SlotMemory Region(size_t bytes) { return AllocSlots(bytes, kPage, /*zero=*/true); }

uint32_t MtuBytes(ibv_mtu m) { return 128u << static_cast<int>(m); }  // IBV_MTU_256 = 1, ...

}  // namespace

// ---------------------------------------------------------------- set-up and teardown

VerbsEndpoint::Resources::~Resources() {
  if (!api) return;
  // Order matters: each object refuses to go while something made from it lives.
  for (const auto& [gid, lid] : joined) {
    ibv_gid g;
    std::memcpy(g.raw, gid.data(), sizeof g.raw);
    api->detach_mcast(qp, &g, lid);
  }
  for (ibv_ah* ah : ahs) api->destroy_ah(ah);
  if (qp) api->destroy_qp(qp);
  for (const auto& [p, mr] : user_mrs) api->dereg_mr(mr);
  if (send_mr) api->dereg_mr(send_mr);
  if (recv_mr) api->dereg_mr(recv_mr);
  if (recv_cq && unacked_events) api->ack_cq_events(recv_cq, unacked_events);  // else destroy waits
  if (send_cq) api->destroy_cq(send_cq);
  if (recv_cq) api->destroy_cq(recv_cq);
  if (channel) api->destroy_comp_channel(channel);
  if (pd) api->dealloc_pd(pd);
  if (ctx) api->close_device(ctx);
  if (epoll >= 0) close(epoll);
  if (more_fd >= 0) close(more_fd);
}

VerbsEndpoint::VerbsEndpoint(PeerId self, const VerbsOptions& opt, const VerbsApi* api, ibv_context* ctx,
                             const std::string& dev, const ibv_port_attr& port)
    : self_(self), opt_(opt), fmt_(opt.job, opt.key) {
  r_.api = api;
  r_.ctx = ctx;  // ours from here on, also if this constructor throws
  const std::string where = " on " + dev + " port " + std::to_string(opt_.port);
  // Settings first: one line each, before anything is allocated.
  HS_REQUIRE(opt_.send_slots > 0 && opt_.recv_slots > 0 && opt_.max_batch > 0)
      << "verbs: slots and batch must be > 0";
  HS_REQUIRE(opt_.heartbeat_ms > 0 || opt_.peer_timeout_ms == 0)
      << "verbs: a peer timeout needs heartbeats (heartbeat_ms > 0)";
  HS_REQUIRE(opt_.signal_every >= 1 && opt_.signal_every <= opt_.send_slots)
      << "verbs: signal_every must be 1.." << opt_.send_slots << " (send_slots), not " << opt_.signal_every;
  HS_REQUIRE(opt_.qkey < 0x80000000u) << "verbs: qkey 0x" << std::hex << opt_.qkey
                                      << " has the high bit set (reserved: it means 'use the QP's own qkey')";
  mtu_ = MtuBytes(port.active_mtu);
  HS_REQUIRE(mtu_ > fmt_.overhead() + 16) << "verbs: the port's MTU of " << mtu_ << " bytes" << where
                                          << " is too small for a frame";
  const uint32_t limit = static_cast<uint32_t>((mtu_ - fmt_.overhead()) / 16 * 16);
  max_payload_ = opt_.max_payload ? opt_.max_payload : limit;
  HS_REQUIRE(max_payload_ >= 16 && max_payload_ % 16 == 0)
      << "verbs: max_payload must be a positive multiple of 16 bytes, not " << max_payload_;
  HS_REQUIRE(max_payload_ <= limit) << "verbs: max_payload " << max_payload_ << " + " << fmt_.overhead()
                                    << " bytes of frame do not fit one UD message: the port's MTU is " << mtu_
                                    << " bytes" << where << " (max_payload at most " << limit << ")";
  ethernet_ = port.link_layer == IBV_LINK_LAYER_ETHERNET;

  ibv_gid gid{};
  HS_REQUIRE(api->query_gid(ctx, opt_.port, opt_.gid_index, &gid) == 0)
      << "verbs: no GID at index " << opt_.gid_index << where << ": " << ErrnoText(errno);
  std::memcpy(me_.gid.data(), gid.raw, me_.gid.size());
  me_.lid = port.lid;

  r_.pd = api->alloc_pd(ctx);
  HS_REQUIRE(r_.pd) << "verbs: cannot allocate a protection domain" << where << ": " << ErrnoText(errno);
  r_.channel = api->create_comp_channel(ctx);
  HS_REQUIRE(r_.channel) << "verbs: cannot create a completion channel" << where << ": " << ErrnoText(errno);
  // Non-blocking, so Poll can drain events without ever waiting (get_cq_event reads this fd).
  const int fl = fcntl(r_.channel->fd, F_GETFL);
  HS_CHECK(fl >= 0 && fcntl(r_.channel->fd, F_SETFL, fl | O_NONBLOCK) == 0) << ErrnoText(errno);

  // Capacities, derived: every send work request in flight may complete (errors complete even
  // unsignalled ones), and the receive queue never holds more than recv_slots.
  sq_depth_ = opt_.send_slots + kBeatRoom;
  r_.send_cq = api->create_cq(ctx, static_cast<int>(sq_depth_), nullptr, nullptr, 0);
  HS_REQUIRE(r_.send_cq) << "verbs: cannot create a completion queue of " << sq_depth_ << where << ": "
                         << ErrnoText(errno);
  r_.recv_cq = api->create_cq(ctx, static_cast<int>(opt_.recv_slots), nullptr, r_.channel, 0);
  HS_REQUIRE(r_.recv_cq) << "verbs: cannot create a completion queue of " << opt_.recv_slots << where << ": "
                         << ErrnoText(errno);

  ibv_qp_init_attr init{};
  init.send_cq = r_.send_cq;
  init.recv_cq = r_.recv_cq;
  init.cap.max_send_wr = sq_depth_;
  init.cap.max_recv_wr = opt_.recv_slots;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  init.qp_type = IBV_QPT_UD;
  init.sq_sig_all = 0;  // selective signalling: we choose which sends complete
  r_.qp = api->create_qp(r_.pd, &init);
  HS_REQUIRE(r_.qp) << "verbs: cannot create a UD queue pair (" << sq_depth_ << " send, " << opt_.recv_slots
                    << " receive entries)" << where << ": " << ErrnoText(errno);
  me_.qpn = r_.qp->qp_num;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = kPkeyIndex;
  a.port_num = opt_.port;
  a.qkey = opt_.qkey;
  int rc = api->modify_qp(r_.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
  HS_REQUIRE(rc == 0) << "verbs: queue pair to INIT" << where << ": " << ErrnoText(rc);

  // The slots, registered once.
  const size_t frame_max = max_payload_ + fmt_.overhead();
  send_stride_ = RoundUp(frame_max, kLine);
  beat_slot_ = opt_.send_slots;
  send_mem_ = Region(send_stride_ * (opt_.send_slots + 1));
  recv_bytes_ = kGrh + mtu_;  // any UD message fits: a frame too long is refused by Parse, not the HCA
  recv_stride_ = RoundUp(kRecvLead + recv_bytes_, kLine);
  static_assert((kRecvLead + kGrh + FrameFormat::kHeaderBytes) % 16 == 0, "received payloads 16-aligned");
  recv_mem_ = Region(recv_stride_ * opt_.recv_slots);
  const size_t send_len = RoundUp(send_stride_ * (opt_.send_slots + 1), kPage);
  const size_t recv_len = RoundUp(recv_stride_ * opt_.recv_slots, kPage);
  r_.send_mr = api->reg_mr(r_.pd, send_mem_.get(), send_len, IBV_ACCESS_LOCAL_WRITE);
  HS_REQUIRE(r_.send_mr) << "verbs: cannot register " << send_len << " bytes of send slots" << where << ": "
                         << ErrnoText(errno) << " (locked-memory limit? ulimit -l)";
  r_.recv_mr = api->reg_mr(r_.pd, recv_mem_.get(), recv_len, IBV_ACCESS_LOCAL_WRITE);
  HS_REQUIRE(r_.recv_mr) << "verbs: cannot register " << recv_len << " bytes of receive slots" << where << ": "
                         << ErrnoText(errno) << " (locked-memory limit? ulimit -l)";

  // The heartbeat frame: sealed once, never written again.
  beat_bytes_ = static_cast<uint32_t>(fmt_.Seal(SendSlot(beat_slot_), FrameHeader{FrameType::kHeartbeat, self_, 0}));

  wrs_.resize(sq_depth_);
  send_sges_.resize(sq_depth_);
  send_wcs_.resize(32);
  inflight_.resize(sq_depth_);
  sq_ = SendQueue<Queued>(opt_.send_slots);
  held_.resize(opt_.recv_slots);
  repost_.reserve(opt_.recv_slots);
  rwrs_.resize(opt_.recv_slots);
  recv_sges_.resize(opt_.recv_slots);
  recv_wcs_.resize(opt_.max_batch);

  // Every receive buffer posted before the QP can receive (INIT allows posting), so no early
  // message finds an empty queue.
  for (uint32_t s = 0; s < opt_.recv_slots; ++s) repost_.push_back(s);
  Repost();
  if (const Status st = status(); !st.ok()) HS_FAIL() << st.what;

  a = {};
  a.qp_state = IBV_QPS_RTR;
  rc = api->modify_qp(r_.qp, &a, IBV_QP_STATE);
  HS_REQUIRE(rc == 0) << "verbs: queue pair to RTR" << where << ": " << ErrnoText(rc);
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = 0;  // UD has no sequence to agree on; the field is required all the same
  rc = api->modify_qp(r_.qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
  HS_REQUIRE(rc == 0) << "verbs: queue pair to RTS" << where << ": " << ErrnoText(rc);

  // wait_fd: the channel (armed below) and our "Poll left some behind" eventfd.
  r_.epoll = epoll_create1(EPOLL_CLOEXEC);
  HS_REQUIRE(r_.epoll >= 0) << "verbs: epoll_create1: " << ErrnoText(errno);
  r_.more_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  HS_REQUIRE(r_.more_fd >= 0) << "verbs: eventfd: " << ErrnoText(errno);
  for (int fd : {r_.channel->fd, r_.more_fd}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    HS_CHECK(epoll_ctl(r_.epoll, EPOLL_CTL_ADD, fd, &ev) == 0) << ErrnoText(errno);
  }
  rc = api->req_notify_cq(r_.recv_cq, 0);
  HS_REQUIRE(rc == 0) << "verbs: cannot arm the receive completion queue" << where << ": " << ErrnoText(rc);
  armed_ = true;
  beat_ = Interval(std::chrono::milliseconds(opt_.heartbeat_ms), Clock::now());
}

VerbsEndpoint::~VerbsEndpoint() = default;  // r_ frees the verbs objects in order

ibv_ah* VerbsEndpoint::MakeAh(const VerbsGid& gid, uint16_t lid) {
  ibv_ah_attr a{};
  a.dlid = lid;
  a.port_num = opt_.port;
  // A GRH where routing needs one: RoCE always, InfiniBand for multicast (the MGID) and for a
  // peer known only by GID. Within an IB subnet a LID is enough and saves 40 bytes a message.
  const bool multicast = gid[0] == 0xff;
  if (ethernet_ || multicast || lid == 0) {
    a.is_global = 1;
    std::memcpy(a.grh.dgid.raw, gid.data(), gid.size());
    a.grh.sgid_index = static_cast<uint8_t>(opt_.gid_index);
    a.grh.hop_limit = 64;
  }
  ibv_ah* ah = r_.api->create_ah(r_.pd, &a);
  if (ah) r_.ahs.push_back(ah);
  return ah;
}

void VerbsEndpoint::AddPeer(PeerId peer, const VerbsAddress& a) {
  HS_REQUIRE(a.qpn != 0 && a.qpn < kMulticastQpn) << "verbs: peer " << peer << " has no queue pair number";
  ibv_ah* ah = MakeAh(a.gid, a.lid);
  HS_REQUIRE(ah) << "verbs: cannot make an address handle for peer " << peer << " (lid " << a.lid << ", qpn "
                 << a.qpn << "): " << ErrnoText(errno);
  for (auto it = by_source_.begin(); it != by_source_.end();)  // a re-added peer's old address
    it = it->second == peer ? by_source_.erase(it) : std::next(it);
  peers_[peer] = Route{ah, a.qpn};  // an old handle stays in r_.ahs until teardown (set-up only)
  by_source_[{a.lid, a.qpn}] = peer;
  beats_.clear();
  for (const auto& [p, route] : peers_) beats_.push_back(Queued{beat_slot_, beat_bytes_, route});
  beat_cursor_ = 0;
}

bool VerbsEndpoint::AddGroup(uint16_t group, const VerbsGid& mgid, uint16_t mlid, bool join) {
  HS_REQUIRE(mgid[0] == 0xff) << "verbs: group " << group << ": a multicast GID starts with 0xff";
  ibv_ah* ah = MakeAh(mgid, mlid);
  if (!ah) return false;
  if (join) {
    ibv_gid g;
    std::memcpy(g.raw, mgid.data(), sizeof g.raw);
    if (r_.api->attach_mcast(r_.qp, &g, mlid) != 0) {
      r_.api->destroy_ah(ah);
      r_.ahs.pop_back();
      return false;
    }
    r_.joined.emplace_back(mgid, mlid);
  }
  groups_[group] = Route{ah, kMulticastQpn};
  return true;
}

Caps VerbsEndpoint::caps() const {
  Caps c;
  c.max_payload = max_payload_;
  c.alignment = 16;  // see the layout in endpoint.hpp
  c.send_slots = opt_.send_slots;
  c.max_batch = opt_.max_batch;
  c.multicast = true;
  // Device memory needs GPUDirect (peer memory or dma-buf registration): not in this build.
  c.memory = static_cast<uint8_t>(MemoryKind::kHost) | static_cast<uint8_t>(MemoryKind::kPinned);
  return c;
}

void VerbsEndpoint::Register(const void* p, size_t bytes, MemoryKind kind) {
  HS_REQUIRE(kind != MemoryKind::kDevice)
      << "verbs: device memory needs a GPUDirect build (peer memory or dma-buf registration); this one has none";
  std::lock_guard<std::mutex> lock(reg_mu_);
  HS_REQUIRE(!r_.user_mrs.count(p)) << "verbs: memory at " << p << " is already registered";
  ibv_mr* mr = r_.api->reg_mr(r_.pd, const_cast<void*>(p), bytes, IBV_ACCESS_LOCAL_WRITE);
  HS_REQUIRE(mr) << "verbs: cannot register " << bytes << " bytes at " << p << ": " << ErrnoText(errno)
                 << " (locked-memory limit? ulimit -l)";
  r_.user_mrs[p] = mr;
}

void VerbsEndpoint::Deregister(const void* p) {
  std::lock_guard<std::mutex> lock(reg_mu_);
  auto it = r_.user_mrs.find(p);
  if (it == r_.user_mrs.end()) return;
  r_.api->dereg_mr(it->second);
  r_.user_mrs.erase(it);
}

std::string VerbsEndpoint::WcText(const ibv_wc& wc) const {
  return std::string(r_.api->wc_status_str(wc.status)) + " (status " + std::to_string(wc.status) +
         ", vendor error " + std::to_string(wc.vendor_err) + ")";
}

// ---------------------------------------------------------------- sender thread

std::byte* VerbsEndpoint::AcquireSend() {
  if (!sq_.acquired()) {
    Heartbeats();
    if (sq_.exhausted()) Reap();
  }
  const std::optional<uint32_t> s = sq_.Acquire();
  if (!s) Bump(counters_.send_full);  // every slot committed or in flight, not yet completed
  return s ? SendSlot(*s) + FrameFormat::kHeaderBytes : nullptr;
}

void VerbsEndpoint::CommitSend(Dest to, uint32_t length) {
  const uint32_t s = sq_.acquired_slot();
  HS_CHECK_LE(length, max_payload_);
  const Route& route = RouteOf(peers_, groups_, to, "verbs: no address for");
  const size_t bytes = fmt_.Seal(SendSlot(s), FrameHeader{FrameType::kData, self_, length});
  sq_.Commit({s, static_cast<uint32_t>(bytes), route});
  CountSent(to, length);
}

void VerbsEndpoint::Flush() {
  Reap();
  Heartbeats();
  const size_t waiting = sq_.waiting();
  const size_t room = sq_depth_ - inflight_count_;
  if (waiting && room) {
    // All that fits the send queue, as one list. When no slot is left free, the last one is
    // signalled whatever the count: one completion then gives the whole window back, instead
    // of the sender waiting for a later send to reach the count.
    const size_t n = std::min(waiting, room);
    sq_.Posted(Post(sq_.oldest(), n, sq_.exhausted()));
  }
}

size_t VerbsEndpoint::Post(const Queued* q, size_t n, bool signal_last) {
  uint32_t run = since_signal_;
  for (size_t i = 0; i < n; ++i) {
    ibv_sge& sge = send_sges_[i];
    sge.addr = reinterpret_cast<uintptr_t>(SendSlot(q[i].slot));
    sge.length = q[i].bytes;
    sge.lkey = r_.send_mr->lkey;
    ibv_send_wr& wr = wrs_[i];
    wr = {};
    wr.wr_id = next_seq_ + i;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.wr.ud.ah = q[i].to.ah;
    wr.wr.ud.remote_qpn = q[i].to.qpn;
    wr.wr.ud.remote_qkey = opt_.qkey;
    wr.next = i + 1 < n ? &wrs_[i + 1] : nullptr;
    // Selective signalling: one completion per signal_every requests; it frees every slot
    // posted before it too (a send queue completes in order).
    if (++run >= opt_.signal_every || (signal_last && i + 1 == n)) {
      wr.send_flags = IBV_SEND_SIGNALED;
      run = 0;
    }
  }
  ibv_send_wr* bad = nullptr;
  const int rc = r_.api->post_send(r_.qp, wrs_.data(), &bad);
  // Requests before `bad` were posted (verbs' rule); none when bad is missing or foreign.
  size_t posted = n;
  if (rc != 0) posted = (bad >= wrs_.data() && bad < wrs_.data() + n) ? static_cast<size_t>(bad - wrs_.data()) : 0;
  for (size_t i = 0; i < posted; ++i) {
    inflight_[(inflight_head_ + inflight_count_) % inflight_.size()] = InFlight{next_seq_ + i, q[i].slot};
    ++inflight_count_;
    since_signal_ = (wrs_[i].send_flags & IBV_SEND_SIGNALED) ? 0 : since_signal_ + 1;
  }
  next_seq_ += n;  // wr_ids of unposted requests are simply never seen
  if (rc == 0) return n;
  if (rc == ENOMEM || rc == EAGAIN) return posted;  // the queue is fuller than we counted: later
  // Anything else will not get better by retrying: latch it, drop the rest, go on.
  Latch(Status::kIoError, kNoPeer, "verbs: post_send: " + ErrnoText(rc));
  for (size_t i = posted; i < n; ++i)
    if (q[i].slot != beat_slot_) sq_.Free(q[i].slot);
  return n;
}

void VerbsEndpoint::Reap() {
  for (;;) {
    const int k = r_.api->poll_cq(r_.send_cq, static_cast<int>(send_wcs_.size()), send_wcs_.data());
    if (k < 0) {
      Latch(Status::kIoError, kNoPeer, "verbs: polling the send completion queue failed");
      return;
    }
    for (int i = 0; i < k; ++i) {
      const ibv_wc& wc = send_wcs_[i];
      if (wc.status != IBV_WC_SUCCESS) Latch(Status::kIoError, kNoPeer, "verbs: send failed: " + WcText(wc));
      // This completion retires every request posted up to it.
      while (inflight_count_ && inflight_[inflight_head_].seq <= wc.wr_id) {
        const uint32_t s = inflight_[inflight_head_].slot;
        if (s != beat_slot_) sq_.Free(s);
        inflight_head_ = (inflight_head_ + 1) % inflight_.size();
        --inflight_count_;
      }
    }
    if (k < static_cast<int>(send_wcs_.size())) return;
  }
}

void VerbsEndpoint::Heartbeats() {
  if (opt_.heartbeat_ms == 0 || !beat_.Due(Clock::now()) || beats_.empty()) return;  // 0: none
  Reap();
  // Best effort: a send queue without room skips the rest of this beat; the next round starts
  // where this one stopped, so with many peers every one still hears from us.
  const size_t n = std::min<size_t>(beats_.size(), sq_depth_ - inflight_count_);
  for (size_t done = 0; done < n;) {
    const size_t first = (beat_cursor_ + done) % beats_.size();
    const size_t run = std::min(n - done, beats_.size() - first);  // contiguous in beats_
    const size_t took = Post(&beats_[first], run, false);
    done += took;
    if (took < run) break;
  }
  beat_cursor_ = (beat_cursor_ + n) % beats_.size();
}

// ---------------------------------------------------------------- receiver thread

void VerbsEndpoint::Repost() {
  const size_t n = repost_.size();
  if (n == 0) return;
  for (size_t i = 0; i < n; ++i) {
    ibv_sge& sge = recv_sges_[i];
    sge.addr = reinterpret_cast<uintptr_t>(RecvBuffer(repost_[i]));
    sge.length = recv_bytes_;
    sge.lkey = r_.recv_mr->lkey;
    ibv_recv_wr& wr = rwrs_[i];
    wr.wr_id = repost_[i];
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.next = i + 1 < n ? &rwrs_[i + 1] : nullptr;
  }
  ibv_recv_wr* bad = nullptr;
  const int rc = r_.api->post_recv(r_.qp, rwrs_.data(), &bad);
  // A receive queue we sized ourselves does not fill up: any failure is a broken device or QP.
  if (rc != 0) Latch(Status::kIoError, kNoPeer, "verbs: post_recv: " + ErrnoText(rc));
  repost_.clear();
}

void VerbsEndpoint::Receive(const ibv_wc& wc, Packet* out, size_t* n, Clock::time_point now) {
  HS_CHECK_LT(wc.wr_id, opt_.recv_slots) << "a receive completion for no slot of ours";
  const uint32_t slot = static_cast<uint32_t>(wc.wr_id);
  if (wc.status != IBV_WC_SUCCESS) {
    // The QP is in error now: its buffers come back flushed and are not posted again.
    Latch(Status::kIoError, kNoPeer, "verbs: receive failed: " + WcText(wc));
    return;
  }
  if (wc.src_qp == me_.qpn && wc.slid == me_.lid) {  // our own multicast send, looped back
    repost_.push_back(slot);
    return;
  }
  // Who sent it is what the fabric says (source LID and QPN), never what the frame claims.
  auto src = by_source_.find({wc.slid, wc.src_qp});
  if (src == by_source_.end()) {
    unknown_.store(unknown_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    Refuse(Reject::kSender);
    repost_.push_back(slot);
    return;
  }
  const std::byte* frame = RecvBuffer(slot) + kGrh;
  FrameHeader h;
  const std::byte* payload = nullptr;
  const std::optional<Reject> why =
      wc.byte_len < kGrh ? std::optional<Reject>(Reject::kShort)
                         : fmt_.Parse(frame, wc.byte_len - kGrh, max_payload_, &h, &payload);
  if (why) {
    Refuse(*why, src->second);
    repost_.push_back(slot);
    return;
  }
  if (!ClaimMatches(h.source, src->second)) {  // another peer's frame from this queue pair
    repost_.push_back(slot);
    return;
  }
  live_.Heard(src->second, now);
  if (h.type == FrameType::kHeartbeat) {  // liveness only
    repost_.push_back(slot);
    return;
  }
  held_[(held_head_ + held_count_) % held_.size()] = slot;
  ++held_count_;
  out[(*n)++] = Packet{src->second, h.length, payload};
}

size_t VerbsEndpoint::Poll(Packet* out, size_t max) {
  if (max == 0) return 0;
  const auto now = Clock::now();
  LatchSilentPeer(live_.heard(), live_.timeout(), "verbs");
  // Channel events: each says the armed CQ got a completion (and disarmed it). Ack them now:
  // destroying the CQ waits for every event to be acked.
  ibv_cq* cq = nullptr;
  void* cq_context = nullptr;
  while (r_.api->get_cq_event(r_.channel, &cq, &cq_context) == 0) {
    ++r_.unacked_events;
    armed_ = false;
  }
  if (r_.unacked_events) {
    r_.api->ack_cq_events(r_.recv_cq, r_.unacked_events);
    r_.unacked_events = 0;
  }
  if (more_set_) {
    uint64_t v;
    (void)!read(r_.more_fd, &v, sizeof v);
    more_set_ = false;
  }
  size_t n = 0;
  bool more = false;
  for (;;) {
    if (n == max) {
      more = true;  // completions may be left in the queue, and no event will say so
      break;
    }
    const int want = static_cast<int>(std::min(max - n, recv_wcs_.size()));
    const int k = r_.api->poll_cq(r_.recv_cq, want, recv_wcs_.data());
    if (k < 0) {
      Latch(Status::kIoError, kNoPeer, "verbs: polling the receive completion queue failed");
      break;
    }
    for (int i = 0; i < k; ++i) Receive(recv_wcs_[i], out, &n, now);
    if (k < want) {  // the queue is empty
      if (armed_) break;
      const int rc = r_.api->req_notify_cq(r_.recv_cq, 0);
      if (rc != 0) {
        Latch(Status::kIoError, kNoPeer, "verbs: cannot arm the receive completion queue: " + ErrnoText(rc));
        break;
      }
      armed_ = true;  // and look once more: a completion that came before the arm raised no event
    }
  }
  Repost();  // dropped frames' buffers go straight back
  if (more) {
    const uint64_t one = 1;
    (void)!write(r_.more_fd, &one, sizeof one);
    more_set_ = true;
  }
  CountReceived(out, n);
  return n;
}

void VerbsEndpoint::Release(size_t n) {
  HS_CHECK_LE(n, held_count_) << "Release of more messages than Poll handed out";
  // Only now do these buffers go back to the wire: until Release, the caller reads them.
  for (size_t i = 0; i < n; ++i) {
    repost_.push_back(held_[held_head_]);
    held_head_ = (held_head_ + 1) % held_.size();
  }
  held_count_ -= n;
  Repost();
}

}  // namespace hogstream
