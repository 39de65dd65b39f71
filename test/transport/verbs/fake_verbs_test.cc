// Tests of the TEST DOUBLE itself (fake_verbs.hpp): the verbs tests are only as good as the
// fake's UD semantics, so each modelled rule is checked here through the seam, the way the
// backend calls it: QP states, the GRH in front of a receive and byte_len counting it, silent
// drops (no buffer, over the MTU, wrong qkey), lkey checks giving error completions that stop
// the send queue, unsignalled sends holding send-queue entries until a later completion is
// polled, completion-channel events only when armed, EBUSY for a CQ still in use. (Multicast
// fan-out is checked through the endpoint, endpoint_test.cc.)
#ifdef HOGSTREAM_VERBS

#include "test/transport/verbs/fake_verbs.hpp"

#include <gtest/gtest.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>

#include <cstring>
#include <vector>

namespace hogstream {
namespace HS_UNITY_ID {

constexpr uint32_t kQkey = 0x42;

// One UD QP on fake0 port 1 with its own PD, CQ (on a channel) and a registered buffer.
struct Qp {
  const VerbsApi* api;
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_comp_channel* ch = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  ibv_mr* mr = nullptr;
  std::vector<std::byte> buf = std::vector<std::byte>(16384);

  explicit Qp(const VerbsApi* a, uint32_t send_wr = 8) : api(a) {
    int n = 0;
    ibv_device** list = api->device_list(&n);
    ctx = api->open_device(list[0]);
    api->free_device_list(list);
    pd = api->alloc_pd(ctx);
    ch = api->create_comp_channel(ctx);
    fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
    cq = api->create_cq(ctx, 64, nullptr, ch, 0);
    ibv_qp_init_attr init{};
    init.send_cq = init.recv_cq = cq;
    init.cap.max_send_wr = send_wr;
    init.cap.max_recv_wr = 8;
    init.cap.max_send_sge = init.cap.max_recv_sge = 1;
    init.qp_type = IBV_QPT_UD;
    qp = api->create_qp(pd, &init);
    mr = api->reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  }
  ~Qp() {
    api->dereg_mr(mr);
    api->destroy_qp(qp);
    api->destroy_cq(cq);
    api->destroy_comp_channel(ch);
    api->dealloc_pd(pd);
    api->close_device(ctx);
  }
  int To(ibv_qp_state s) {
    ibv_qp_attr a{};
    a.qp_state = s;
    int mask = IBV_QP_STATE;
    if (s == IBV_QPS_INIT) {
      a.port_num = 1;
      a.qkey = kQkey;
      mask |= IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
    }
    if (s == IBV_QPS_RTS) mask |= IBV_QP_SQ_PSN;
    return api->modify_qp(qp, &a, mask);
  }
  void Ready() {
    ASSERT_EQ(To(IBV_QPS_INIT), 0);
    ASSERT_EQ(To(IBV_QPS_RTR), 0);
    ASSERT_EQ(To(IBV_QPS_RTS), 0);
  }
  int Recv(size_t offset, uint32_t len, uint32_t lkey = 0) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(buf.data() + offset), len, lkey ? lkey : mr->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = offset;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    return api->post_recv(qp, &wr, &bad);
  }
  int Send(const Qp& to, uint32_t len, bool signaled, uint32_t lkey = 0, uint32_t qkey = kQkey, uint64_t id = 1) {
    ibv_ah_attr aa{};
    aa.port_num = 1;
    aa.dlid = 1;
    ibv_ah* ah = api->create_ah(pd, &aa);
    ibv_sge sge{reinterpret_cast<uintptr_t>(buf.data()), len, lkey ? lkey : mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
    wr.wr.ud.ah = ah;
    wr.wr.ud.remote_qpn = to.qp->qp_num;
    wr.wr.ud.remote_qkey = qkey;
    ibv_send_wr* bad = nullptr;
    const int rc = api->post_send(qp, &wr, &bad);
    api->destroy_ah(ah);
    return rc;
  }
  std::vector<ibv_wc> Poll() {
    std::vector<ibv_wc> out(64);
    const int n = api->poll_cq(cq, 64, out.data());
    out.resize(n < 0 ? 0 : n);
    return out;
  }
};

class FakeVerbsTest : public testing::Test {
 protected:
  void TearDown() override {
    EXPECT_EQ(fake_.live_objects(), 0u);
    EXPECT_EQ(fake_.misuse().size(), expected_misuse_);
    for (size_t i = expected_misuse_; i < fake_.misuse().size(); ++i) ADD_FAILURE() << "misuse: " << fake_.misuse()[i];
  }
  FakeVerbs fake_;
  size_t expected_misuse_ = 0;  // refused calls a test makes on purpose
};

TEST_F(FakeVerbsTest, QueuePairStatesGatePosting) {
  Qp a(fake_.api()), b(fake_.api());
  EXPECT_EQ(a.Recv(0, 4096), EINVAL) << "a receive posted in RESET";
  EXPECT_EQ(a.To(IBV_QPS_RTR), EINVAL) << "RESET -> RTR skips INIT";
  ibv_qp_attr bare{};
  bare.qp_state = IBV_QPS_INIT;
  EXPECT_EQ(a.api->modify_qp(a.qp, &bare, IBV_QP_STATE), EINVAL) << "INIT needs pkey index, port, qkey";
  ASSERT_EQ(a.To(IBV_QPS_INIT), 0);
  EXPECT_EQ(a.Recv(0, 4096), 0) << "receives may be posted in INIT";
  b.Ready();
  EXPECT_EQ(a.Send(b, 8, true), EINVAL) << "a send posted before RTS";
  ASSERT_EQ(a.To(IBV_QPS_RTR), 0);
  ibv_qp_attr rts{};
  rts.qp_state = IBV_QPS_RTS;
  EXPECT_EQ(a.api->modify_qp(a.qp, &rts, IBV_QP_STATE), EINVAL) << "RTS needs sq_psn";
  ASSERT_EQ(a.To(IBV_QPS_RTS), 0);
  EXPECT_EQ(a.Send(b, 8, true), 0);
}

TEST_F(FakeVerbsTest, ReceiveGetsTheGrhThenThePayload) {
  Qp a(fake_.api()), b(fake_.api());
  a.Ready();
  b.Ready();
  for (int i = 0; i < 100; ++i) a.buf[i] = std::byte(i + 1);
  ASSERT_EQ(b.Recv(1000, 4096 + 40), 0);
  ASSERT_EQ(a.Send(b, 100, false), 0);
  const auto wc = b.Poll();
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc[0].opcode, IBV_WC_RECV);
  EXPECT_EQ(wc[0].wr_id, 1000u);
  EXPECT_EQ(wc[0].byte_len, 140u) << "byte_len counts the 40 GRH bytes";
  EXPECT_EQ(wc[0].src_qp, a.qp->qp_num);
  EXPECT_EQ(wc[0].slid, 1);
  EXPECT_EQ(std::memcmp(b.buf.data() + 1040, a.buf.data(), 100), 0) << "the payload starts 40 bytes in";
  EXPECT_TRUE(a.Poll().empty()) << "an unsignalled send made a completion";
}

TEST_F(FakeVerbsTest, UdDropsSilently) {
  Qp a(fake_.api()), b(fake_.api());
  a.Ready();
  b.Ready();
  ASSERT_EQ(a.Send(b, 100, true), 0);  // nothing posted at b: RNR
  EXPECT_EQ(fake_.stats().dropped_rnr, 1u);
  ASSERT_EQ(b.Recv(0, 8192), 0);
  ASSERT_EQ(a.Send(b, 4097, true), 0);  // over the MTU
  EXPECT_EQ(fake_.stats().dropped_size, 1u);
  ASSERT_EQ(a.Send(b, 100, true, 0, kQkey + 1), 0);  // another qkey
  EXPECT_EQ(fake_.stats().dropped_unrouted, 1u);
  ASSERT_EQ(b.Recv(8192, 50), 0);
  EXPECT_TRUE(b.Poll().empty());
  const auto sent = a.Poll();
  ASSERT_EQ(sent.size(), 3u) << "each signalled send completes, delivered or not";
  for (const ibv_wc& w : sent) EXPECT_EQ(w.status, IBV_WC_SUCCESS);
  ASSERT_EQ(a.Send(b, 100, false), 0);  // reaches the first buffer; the second is too small...
  ASSERT_EQ(a.Send(b, 100, false), 0);  // ...for this one: dropped
  EXPECT_EQ(b.Poll().size(), 1u);
  EXPECT_EQ(fake_.stats().dropped_size, 2u);
}

TEST_F(FakeVerbsTest, WrongLkeyIsAnErrorCompletionThatStopsTheSendQueue) {
  Qp a(fake_.api()), b(fake_.api());
  a.Ready();
  b.Ready();
  ASSERT_EQ(b.Recv(0, 8192), 0);
  ASSERT_EQ(a.Send(b, 100, false, a.mr->lkey + 99), 0);  // posted fine; fails on execution
  ASSERT_EQ(a.Send(b, 100, false, 0, kQkey, 2), 0);
  const auto wc = a.Poll();
  ASSERT_EQ(wc.size(), 2u) << "errors complete even unsignalled";
  EXPECT_EQ(wc[0].status, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(wc[1].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_TRUE(b.Poll().empty());
  // A receive buffer outside registered memory completes in error when a message comes.
  Qp c(fake_.api());
  c.Ready();
  ASSERT_EQ(c.Recv(0, 8192, c.mr->lkey + 5), 0);
  ASSERT_EQ(b.Send(c, 10, false), 0);
  const auto rc = c.Poll();
  ASSERT_EQ(rc.size(), 1u);
  EXPECT_EQ(rc[0].status, IBV_WC_LOC_PROT_ERR);
}

TEST_F(FakeVerbsTest, UnsignalledSendsHoldTheQueueUntilACompletionIsPolled) {
  Qp a(fake_.api(), 4), b(fake_.api());
  a.Ready();
  b.Ready();
  for (int i = 0; i < 4; ++i) ASSERT_EQ(a.Send(b, 8, false), 0);
  EXPECT_EQ(a.Send(b, 8, true), ENOMEM) << "four unsignalled sends fill a queue of four";
  Qp c(fake_.api(), 4);
  c.Ready();
  ASSERT_EQ(c.Send(b, 8, false), 0);
  ASSERT_EQ(c.Send(b, 8, false), 0);
  ASSERT_EQ(c.Send(b, 8, true), 0);
  ASSERT_EQ(c.Send(b, 8, false), 0);
  EXPECT_EQ(c.Send(b, 8, false), ENOMEM) << "not freed before the completion is polled";
  ASSERT_EQ(c.Poll().size(), 1u);
  // The completion frees its own entry and the two before it, not the one after.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(c.Send(b, 8, false), 0) << i;
  EXPECT_EQ(c.Send(b, 8, false), ENOMEM);
}

TEST_F(FakeVerbsTest, ChannelEventsOnlyWhenArmed) {
  Qp a(fake_.api()), b(fake_.api());
  a.Ready();
  b.Ready();
  for (int i = 0; i < 4; ++i) ASSERT_EQ(b.Recv(size_t(i) * 4096, 4096), 0);
  auto readable = [&] {
    pollfd p{b.ch->fd, POLLIN, 0};
    return ::poll(&p, 1, 0) == 1;
  };
  ASSERT_EQ(a.Send(b, 8, false), 0);
  EXPECT_FALSE(readable()) << "an event without an arm";
  ASSERT_EQ(b.api->req_notify_cq(b.cq, 0), 0);
  ASSERT_EQ(a.Send(b, 8, false), 0);
  ASSERT_EQ(a.Send(b, 8, false), 0);
  EXPECT_TRUE(readable());
  ibv_cq* cq = nullptr;
  void* ctx = nullptr;
  ASSERT_EQ(b.api->get_cq_event(b.ch, &cq, &ctx), 0);
  EXPECT_EQ(cq, b.cq);
  EXPECT_NE(b.api->get_cq_event(b.ch, &cq, &ctx), 0) << "one event per arm";
  EXPECT_EQ(errno, EAGAIN);
  EXPECT_FALSE(readable());
  EXPECT_EQ(b.Poll().size(), 3u);
  EXPECT_EQ(b.api->destroy_cq(b.cq), EBUSY) << "a QP still uses it";
  b.api->ack_cq_events(b.cq, 1);
  expected_misuse_ = 1;  // the refused destroy
}

}  // namespace
}  // namespace hogstream

#endif  // HOGSTREAM_VERBS
