// Verbs endpoint: ONE unreliable-datagram (UD) queue pair serves every peer of the job (an
// address handle per peer) and every multicast group it sends to (remote QPN 0xFFFFFF); frames
// (transport/frame.hpp) in preallocated slots inside two registered memory regions; a batch of
// sends is one linked list of work requests, one post_send (one doorbell), with one signalled
// completion per signal_every sends; heartbeats and a peer timeout for "peer down", as udp/.
// Not for: reliability (UD drops when the receiver has no buffer posted: "RNR" is a silent
// drop, and the delta rule tolerates it); messages over the path MTU (UD does not segment:
// max_payload + frame overhead <= the port's active MTU, <= 4096 on InfiniBand); the subnet
// administrator's multicast join (rdma_join_multicast): AddGroup only attaches the QP to the
// group on this HCA (ibv_attach_mcast), so on a real fabric someone must have joined the group
// for the switches to route it: not done here yet. GPU memory (GPUDirect): not in this build.
// Source of a received message: the completion's (slid, src_qp) looked up among the peers;
// the frame's own claim is ignored. On RoCE every slid is 0, so two peers on different hosts
// with equal QPNs would be confused: not handled yet (it would need the GRH's source GID).
//
// Memory layout (why it looks so). Send slot s: a frame at send_mem + s * send_stride (cache
// line aligned), its payload 48 bytes in (16-aligned). One extra send slot holds the sealed
// heartbeat frame, which never changes, so any number of heartbeat sends may read it at once.
// Receive slot s: the buffer posted starts 8 bytes into a cache-line-aligned slot; the HCA
// writes the 40-byte GRH there, the frame follows at +48 and its payload at +96 (16-aligned).
// Both regions are page aligned and registered once (one MR each) at set-up.
//
// Threads: as transport.hpp (one sender thread: AcquireSend, CommitSend, Flush, and the send
// completion queue, which only it polls; one receiver thread: Poll, Release, and the receive
// completion queue). Set-up calls (AddPeer, AddGroup, Register, Deregister) come from the owner
// before either thread uses the endpoint (Register/Deregister: any time, under a lock).
// wait_fd(): an epoll fd over the completion channel (armed for receive completions once Poll
// finds the queue empty) and an eventfd of ours that Poll sets when it stopped at `max` with
// completions perhaps left behind: readable whenever Poll may have something.
// Liveness: as udp/ (heartbeats from AcquireSend / Flush, the timeout checked in Poll).
// Teardown: the destructor detaches groups, destroys address handles, the QP, the MRs, then the
// CQs (after acking every channel event: ibv_destroy_cq waits for that), the channel, the PD
// and closes the device, in that order, because each refuses to go while a later one's users
// live. Nothing is in flight in user memory (slots are ours), so endpoints may die in any order.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport/frame.hpp"
#include "transport/send_queue.hpp"
#include "transport/transport.hpp"
#include "transport/verbs/api.hpp"
#include "transport/verbs/device.hpp"

namespace hogstream {

class VerbsEndpoint final : public Transport {
 public:
  // Takes `ctx` (opened on opt.device) and closes it, also when this throws. Errors (a
  // resource the device refuses, max_payload over the MTU) are one line.
  // `port` is what query_port answered for opt.port (the device checked it is active).
  VerbsEndpoint(PeerId self, const VerbsOptions& opt, const VerbsApi* api, ibv_context* ctx,
                const std::string& device_name, const ibv_port_attr& port);
  ~VerbsEndpoint() override;
  VerbsEndpoint(const VerbsEndpoint&) = delete;
  VerbsEndpoint& operator=(const VerbsEndpoint&) = delete;

  // Set-up (owner thread, before traffic). This endpoint's own address, for the job layer to
  // hand to the other peers.
  VerbsAddress Address() const { return me_; }
  // Sends to Dest::Peer(peer) go to `a`; received messages from `a` are from `peer`. Adding a
  // peer again replaces its address. The device refusing an address handle is an Error.
  void AddPeer(PeerId peer, const VerbsAddress& a);
  // Sends to Dest::Group(group) go to the multicast group `mgid` (first byte 0xff) / `mlid`;
  // with `join`, this QP is also attached to the group and receives it. false: the device
  // refused the address handle or the attach; the group is then unusable, nothing else changed.
  bool AddGroup(uint16_t group, const VerbsGid& mgid, uint16_t mlid, bool join);
  // Any thread. Messages received from a queue pair that is no peer of ours, dropped.
  uint64_t unknown_sources() const { return unknown_.load(std::memory_order_relaxed); }

  PeerId self() const override { return self_; }
  Caps caps() const override;
  std::byte* AcquireSend() override;
  void CommitSend(Dest to, uint32_t length) override;
  void Flush() override;
  size_t Poll(Packet* out, size_t max) override;
  void Release(size_t n) override;
  int wait_fd() const override { return r_.epoll; }
  void Register(const void* p, size_t bytes, MemoryKind kind) override;
  void Deregister(const void* p) override;

 private:
  // Every verbs object this endpoint owns; its destructor frees them in the order verbs needs
  // (see "Teardown" above), so a constructor that throws half-way leaks nothing.
  struct Resources {
    const VerbsApi* api = nullptr;
    ibv_context* ctx = nullptr;
    ibv_pd* pd = nullptr;
    ibv_comp_channel* channel = nullptr;
    ibv_cq* send_cq = nullptr;
    ibv_cq* recv_cq = nullptr;
    ibv_qp* qp = nullptr;
    ibv_mr* send_mr = nullptr;
    ibv_mr* recv_mr = nullptr;
    std::vector<ibv_ah*> ahs;                       // peers' and groups'
    std::vector<std::pair<VerbsGid, uint16_t>> joined;  // attached multicast groups
    std::map<const void*, ibv_mr*> user_mrs;        // Register(); under reg_mu_
    unsigned unacked_events = 0;                    // receiver thread: channel events not acked
    int epoll = -1, more_fd = -1;                   // wait_fd() and the "Poll left some" eventfd
    ~Resources();
  };
  struct Route {
    ibv_ah* ah = nullptr;
    uint32_t qpn = 0;  // 0xFFFFFF for a multicast group
  };
  struct Queued {
    uint32_t slot;
    uint32_t bytes;  // frame bytes
    Route to;
  };
  struct InFlight {  // a posted send work request, oldest first
    uint64_t seq;    // its wr_id
    uint32_t slot;   // beat_slot_: a heartbeat (no slot to free)
  };

  std::byte* SendSlot(uint32_t s) const { return send_mem_.get() + size_t{s} * send_stride_; }
  std::byte* RecvBuffer(uint32_t s) const { return recv_mem_.get() + size_t{s} * recv_stride_ + kRecvLead; }
  ibv_ah* MakeAh(const VerbsGid& gid, uint16_t lid);
  std::string WcText(const ibv_wc& wc) const;
  // Sender thread.
  void Reap();  // send completions -> free slots
  // Posts q[0..n) as one linked list (one post_send); `signal_last`: the last one is signalled
  // whatever the count. Returns how many it consumed (posted, or dropped after a hard error);
  // the rest stay for a later Flush.
  size_t Post(const Queued* q, size_t n, bool signal_last);
  void Heartbeats();
  // Receiver thread.
  void Repost();  // repost_'s slots back to the receive queue, one post_recv
  // One receive completion: a message into out[*n], or its slot onto repost_.
  void Receive(const ibv_wc& wc, Packet* out, size_t* n, std::chrono::steady_clock::time_point now);

  static constexpr uint32_t kGrh = 40;      // bytes the HCA writes before every UD message
  static constexpr uint32_t kRecvLead = 8;  // receive buffer offset in its slot (see above)
  static constexpr uint32_t kMulticastQpn = 0xFFFFFF;

  const PeerId self_;
  const VerbsOptions opt_;
  const FrameFormat fmt_;
  // Declared before r_, so destroyed after it: memory is freed only once deregistered.
  SlotMemory send_mem_{nullptr, nullptr}, recv_mem_{nullptr, nullptr};
  Resources r_;
  uint32_t max_payload_ = 0;
  uint32_t mtu_ = 0;           // the port's active MTU, bytes
  uint32_t beat_slot_ = 0;     // == send_slots: the heartbeat frame's slot
  uint32_t beat_bytes_ = 0;    // its sealed size
  uint32_t sq_depth_ = 0;      // send work requests in flight at most (slots + heartbeat room)
  uint32_t recv_bytes_ = 0;    // receive buffer length: the GRH + the port's MTU
  bool ethernet_ = false;      // RoCE: every send needs a GRH (IB routes by LID in a subnet)
  size_t send_stride_ = 0, recv_stride_ = 0;
  VerbsAddress me_;
  std::map<PeerId, Route> peers_;
  std::map<uint16_t, Route> groups_;
  std::map<std::pair<uint16_t, uint32_t>, PeerId> by_source_;  // (lid, qpn) -> peer
  std::vector<Queued> beats_;  // one heartbeat per peer (rebuilt by AddPeer)
  mutable std::mutex reg_mu_;  // Register / Deregister

  // Sender thread. The queue: committed, not yet posted (unpaced); a posted slot is in flight
  // until its completion is reaped.
  SendQueue<Queued> sq_;
  std::vector<InFlight> inflight_;  // ring of sq_depth_ entries
  size_t inflight_head_ = 0, inflight_count_ = 0;
  uint64_t next_seq_ = 1;
  uint32_t since_signal_ = 0;       // posted work requests since the last signalled one
  size_t beat_cursor_ = 0;          // the peer the next heartbeat round starts at
  Interval beat_;
  std::vector<ibv_send_wr> wrs_;
  std::vector<ibv_sge> send_sges_;
  std::vector<ibv_wc> send_wcs_;

  // Receiver thread.
  std::vector<uint32_t> held_;       // ring of recv_slots: slots handed out, oldest first
  size_t held_head_ = 0, held_count_ = 0;
  std::vector<uint32_t> repost_;     // dropped frames' slots, re-posted at the end of a Poll
  std::vector<ibv_recv_wr> rwrs_;
  std::vector<ibv_sge> recv_sges_;
  std::vector<ibv_wc> recv_wcs_;
  bool armed_ = false;               // the receive CQ is armed and nothing was seen since
  bool more_set_ = false;            // r_.more_fd holds a count
  Liveness live_{opt_.heartbeat_ms, opt_.peer_timeout_ms};
  std::atomic<uint64_t> unknown_{0};
};

}  // namespace hogstream
