// TEST DOUBLE. An in-process fake of exactly the verbs calls in transport/verbs/api.hpp, with
// unreliable-datagram semantics, so the verbs backend's logic runs in CI on hosts that cannot
// have an RDMA device (this one: no CONFIG_INFINIBAND). Not a verbs provider, not for
// production, and no claim about timing or any hardware's quirks beyond what is listed here.
//
// What it models (the facts in /work/shared/research/network.md section 3):
//  * devices with ports (LID, one GID, active MTU, state, InfiniBand or Ethernet link layer);
//    contexts, PDs, MRs (lkey), CQs, completion channels whose fd (an eventfd) really becomes
//    readable, address handles; destroying an object still in use fails with EBUSY (and is
//    recorded as misuse), as the library would refuse (or hang, for unacked CQ events).
//  * UD queue pairs only, with the state machine RESET -> INIT (pkey index, port, qkey) ->
//    RTR -> RTS (sq_psn); posting a send outside RTS, or a receive in RESET, fails (EINVAL).
//  * post_send executes each request at once, in order: gathers its bytes from registered
//    memory (an sge outside an MR of the QP's PD with that lkey is a LOC_PROT_ERR completion
//    and puts the send queue in error: later sends complete WR_FLUSH_ERR), then delivers to
//    the QP the address handle names (LID, or GID when global; remote QPN) or, for remote QPN
//    0xFFFFFF and a multicast GID, to every QP attached to that group; only with the matching
//    qkey (a remote qkey with the high bit set means the sender's own). The receiver's next
//    posted buffer gets the 40-byte GRH, then the payload; its completion carries byte_len
//    (GRH included, as on hardware), src_qp, slid, IBV_WC_GRH when global. No receive posted
//    (RNR on UD), a message over the port's MTU or over the posted buffer: silently dropped
//    (counted in stats()). A send completion is made only for signalled requests (or errors);
//    send-queue entries are freed only when poll_cq returns a completion at or after them, as
//    providers do, so a sender that never signals runs its queue full (ENOMEM).
//  * multicast loopback: a sender attached to its own group receives its sends (the HCA
//    default) unless Options::multicast_loopback is false.
// Fault hooks fail the next post or make the next completion an error (the QP then goes to
// the error state, as hardware does).
//
// Threads: every call takes one mutex inside the fake (get_cq_event waits on the fd without
// it), so senders and receivers may call concurrently. Several fakes may live at once (up to
// 8): each has its own api() table; objects find their fake through themselves.
#pragma once

#ifdef HOGSTREAM_VERBS

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transport/verbs/api.hpp"
#include "transport/verbs/device.hpp"

namespace hogstream {

class FakeVerbs {
 public:
  struct Port {
    uint16_t lid = 1;        // 0 on Ethernet
    VerbsGid gid{};          // GID table entry 0 (the only one)
    uint32_t mtu = 4096;     // active MTU in bytes: 256, 512, 1024, 2048 or 4096
    ibv_port_state state = IBV_PORT_ACTIVE;
    bool ethernet = false;   // RoCE: link layer Ethernet, routing by GID
  };
  struct Device {
    std::string name;
    std::vector<Port> ports;  // port numbers 1..size()
  };
  struct Options {
    std::vector<Device> devices;
    bool multicast_loopback = true;
  };
  // One InfiniBand device "fake0": port 1 active, LID 1, GID fe80::1, MTU 4096.
  static Options OneDevice();
  // No device at all (ibv_get_device_list answers an empty list).
  static Options NoDevice() { return Options{}; }

  explicit FakeVerbs(Options o = OneDevice());
  ~FakeVerbs();
  FakeVerbs(const FakeVerbs&) = delete;
  FakeVerbs& operator=(const FakeVerbs&) = delete;

  // The seam's table bound to this fake; valid while it lives.
  const VerbsApi* api() const;

  // Fault hooks (any thread): the next post_send / post_recv returns `err` and posts nothing.
  void FailNextPostSend(int err);
  void FailNextPostRecv(int err);
  // The next send executed completes with `status` (signalled or not); its QP's send queue
  // goes to error. The next message delivered completes its receive buffer with `status`;
  // that QP goes to the error state (its other buffers come back WR_FLUSH_ERR).
  void ErrorNextSend(ibv_wc_status status);
  void ErrorNextReceive(ibv_wc_status status);

  struct Stats {
    uint64_t post_send_calls = 0, post_recv_calls = 0;
    uint64_t sends = 0, signaled = 0;  // send requests executed; how many were signalled
    uint64_t delivered = 0;            // messages placed in a receive buffer
    uint64_t dropped_rnr = 0;          // no receive buffer posted
    uint64_t dropped_size = 0;         // over the MTU or the posted buffer
    uint64_t dropped_unrouted = 0;     // no such QP / group member, wrong qkey, QP not ready
    uint64_t events = 0;               // completion-channel events raised
  };
  Stats stats() const;
  // What hardware or libibverbs would have punished (a hang, EBUSY, a CQ overrun, a call on a
  // destroyed object). Tests expect none.
  std::vector<std::string> misuse() const;
  // Contexts, PDs, MRs, CQs, channels, QPs and AHs made and not destroyed.
  size_t live_objects() const;

  // A bare UD QP (RTS) on a port of this fake, driven through api(): lets a test put any bytes
  // on the fabric, from a source no endpoint knows unless it is added as a peer.
  class RawQp {
   public:
    RawQp(FakeVerbs& fake, uint32_t qkey, const std::string& device = "fake0", uint8_t port = 1);
    ~RawQp();
    RawQp(const RawQp&) = delete;
    RawQp& operator=(const RawQp&) = delete;
    VerbsAddress address() const;
    // One UD message of `bytes` to `to` (remote qkey `qkey`), its completion awaited; true if
    // the send completed without error (delivery is never promised on UD).
    bool Send(const VerbsAddress& to, const std::vector<std::byte>& bytes, uint32_t qkey);

   private:
    const VerbsApi* api_;
    uint8_t port_;
    ibv_context* ctx_ = nullptr;
    ibv_pd* pd_ = nullptr;
    ibv_cq* cq_ = nullptr;
    ibv_qp* qp_ = nullptr;
    ibv_mr* mr_ = nullptr;
    std::vector<std::byte> buf_;
    VerbsAddress me_;
  };

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace hogstream

#endif  // HOGSTREAM_VERBS
