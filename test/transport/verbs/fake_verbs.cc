// TEST DOUBLE: the fake verbs fabric (see fake_verbs.hpp for what it models and what not).
// Every object handed out is a Handle<ibv_X>: the verbs struct first (what the caller sees),
// then the fake it belongs to, so a call finds its fake from its argument. State lives in
// maps inside the fake, keyed by the handle; destroyed handles are kept (dead) until the fake
// goes, so a call on a destroyed object is caught as misuse instead of reading freed memory.
#include "test/transport/verbs/fake_verbs.hpp"

#ifdef HOGSTREAM_VERBS

#include <errno.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <type_traits>

#include "base/common.hpp"

namespace hogstream {

namespace {

constexpr uint32_t kGrhBytes = 40;
constexpr uint32_t kMulticastQpn = 0xFFFFFF;
constexpr int kSlots = 8;  // fakes alive at once (one device-list function each)

template <class T>
struct Handle {
  static_assert(std::is_standard_layout_v<T>);
  T ib;  // first: a T* from us is a Handle<T>* too
  FakeVerbs::Impl* fake;
};

template <class T>
FakeVerbs::Impl* FakeOf(T* p) {
  return reinterpret_cast<Handle<T>*>(p)->fake;
}

ibv_mtu MtuEnum(uint32_t bytes) {
  switch (bytes) {
    case 256: return IBV_MTU_256;
    case 512: return IBV_MTU_512;
    case 1024: return IBV_MTU_1024;
    case 2048: return IBV_MTU_2048;
    default: return IBV_MTU_4096;
  }
}

std::mutex g_slots_mu;
FakeVerbs::Impl* g_slots[kSlots] = {};

}  // namespace

class FakeVerbs::Impl {
 public:
  explicit Impl(Options o);
  ~Impl();

  Options opt;
  VerbsApi api;
  int slot = -1;
  mutable std::mutex mu;
  Stats stats;
  std::vector<std::string> misuse;
  int fail_post_send = 0, fail_post_recv = 0;
  ibv_wc_status error_send = IBV_WC_SUCCESS, error_recv = IBV_WC_SUCCESS;

  struct Ctx {
    int dev;
  };
  struct Pd {
    ibv_context* ctx;
  };
  struct Mr {
    ibv_pd* pd;
    uintptr_t addr;
    size_t length;
    int access;
  };
  struct Channel {
    int fd;
    std::deque<ibv_cq*> events;
  };
  struct Entry {  // a completion waiting in a CQ
    ibv_wc wc;
    ibv_qp* qp;
    uint64_t serial;  // send completions: the request's serial (frees the send queue up to it)
    bool send;
  };
  struct Cq {
    int cqe;
    ibv_comp_channel* channel;
    std::deque<Entry> q;
    bool armed = false;
    uint64_t events_got = 0, events_acked = 0;
  };
  struct Recv {
    uint64_t wr_id;
    std::vector<ibv_sge> sges;
  };
  struct Qp {
    ibv_pd* pd;
    ibv_cq *scq, *rcq;
    ibv_qp_cap cap;
    bool sig_all;
    int dev;
    uint8_t port = 0;
    uint32_t qkey = 0;
    std::deque<Recv> rq;
    std::deque<uint64_t> sq;  // serials of posted sends no completion has retired yet
    bool sq_error = false;
    std::set<VerbsGid> groups;
  };
  struct Ah {
    ibv_pd* pd;
    ibv_ah_attr attr;
  };

  std::vector<std::unique_ptr<Handle<ibv_device>>> devices;
  std::set<ibv_device**> lists;
  std::map<ibv_context*, Ctx> ctxs;
  std::map<ibv_pd*, Pd> pds;
  std::map<ibv_mr*, Mr> mrs;
  std::map<ibv_comp_channel*, Channel> channels;
  std::map<ibv_cq*, Cq> cqs;
  std::map<ibv_qp*, Qp> qps;
  std::map<ibv_ah*, Ah> ahs;
  std::vector<std::shared_ptr<void>> handles;  // every handle ever made, alive until ~Impl
  uint32_t next_qpn = 0x48;
  uint32_t next_key = 0x1000;
  uint64_t next_serial = 0;

  template <class T>
  T* Make(Impl* self) {
    auto h = std::make_shared<Handle<T>>();
    std::memset(&h->ib, 0, sizeof h->ib);
    h->fake = self;
    handles.push_back(h);
    return &h->ib;
  }
  void Misuse(const std::string& what) { misuse.push_back(what); }
  const Port* PortOf(int dev, uint8_t port) const {
    const auto& ports = opt.devices[dev].ports;
    return port >= 1 && port <= ports.size() ? &ports[port - 1] : nullptr;
  }
  void Push(ibv_cq* cq, const Entry& e);
  void Flush(ibv_qp* qp, Qp& q);
  void Execute(ibv_qp* qp, Qp& q, const ibv_send_wr& w, uint64_t serial);
  void Deliver(ibv_qp* from, Qp& q, const ibv_ah_attr& ah, uint32_t remote_qkey, ibv_qp* to,
               const std::vector<std::byte>& msg);
  bool InMr(ibv_pd* pd, const ibv_sge& s, bool write) const;
};

// ---------------------------------------------------------------- the verbs calls

namespace {

using Impl = FakeVerbs::Impl;
using Lock = std::lock_guard<std::mutex>;

ibv_device** ListDevices(Impl* f, int* count) {
  if (!f) {
    errno = ENODEV;
    return nullptr;
  }
  Lock l(f->mu);
  auto** list = new ibv_device*[f->devices.size() + 1];
  for (size_t i = 0; i < f->devices.size(); ++i) list[i] = &f->devices[i]->ib;
  list[f->devices.size()] = nullptr;
  if (count) *count = static_cast<int>(f->devices.size());
  f->lists.insert(list);
  return list;
}

template <int I>
ibv_device** DeviceList(int* count) {
  Impl* f;
  {
    Lock l(g_slots_mu);
    f = g_slots[I];
  }
  return ListDevices(f, count);
}
ibv_device** (*const kDeviceLists[kSlots])(int*) = {DeviceList<0>, DeviceList<1>, DeviceList<2>, DeviceList<3>,
                                                     DeviceList<4>, DeviceList<5>, DeviceList<6>, DeviceList<7>};

void FreeDeviceList(ibv_device** list) {
  if (!list) return;
  Impl* f = list[0] ? FakeOf(list[0]) : nullptr;
  if (f) {
    Lock l(f->mu);
    if (!f->lists.erase(list)) f->Misuse("free_device_list of a list not ours or freed twice");
  }
  delete[] list;
}

const char* DeviceName(ibv_device* d) { return d->name; }

ibv_context* OpenDevice(ibv_device* d) {
  Impl* f = FakeOf(d);
  Lock l(f->mu);
  int index = -1;
  for (size_t i = 0; i < f->devices.size(); ++i)
    if (&f->devices[i]->ib == d) index = static_cast<int>(i);
  if (index < 0) {
    f->Misuse("open_device of an unknown device");
    errno = ENODEV;
    return nullptr;
  }
  ibv_context* c = f->Make<ibv_context>(f);
  c->device = d;
  c->cmd_fd = c->async_fd = -1;
  f->ctxs[c] = Impl::Ctx{index};
  return c;
}

int CloseDevice(ibv_context* c) {
  Impl* f = FakeOf(c);
  Lock l(f->mu);
  if (!f->ctxs.count(c)) return f->Misuse("close_device of an unknown context"), EINVAL;
  for (const auto& [p, pd] : f->pds)
    if (pd.ctx == c) return f->Misuse("close_device with a PD still allocated"), EBUSY;
  for (const auto& [ch, x] : f->channels)
    if (ch->context == c) return f->Misuse("close_device with a completion channel alive"), EBUSY;
  for (const auto& [cq, x] : f->cqs)
    if (cq->context == c) return f->Misuse("close_device with a CQ alive"), EBUSY;
  f->ctxs.erase(c);
  return 0;
}

int QueryPort(ibv_context* c, uint8_t port, ibv_port_attr* a) {
  Impl* f = FakeOf(c);
  Lock l(f->mu);
  auto it = f->ctxs.find(c);
  const FakeVerbs::Port* p = it == f->ctxs.end() ? nullptr : f->PortOf(it->second.dev, port);
  if (!p) {
    errno = EINVAL;
    return EINVAL;
  }
  std::memset(a, 0, sizeof *a);
  a->state = p->state;
  a->max_mtu = IBV_MTU_4096;
  a->active_mtu = MtuEnum(p->mtu);
  a->gid_tbl_len = 1;
  a->max_msg_sz = p->mtu;
  a->pkey_tbl_len = 1;
  a->lid = p->lid;
  a->link_layer = p->ethernet ? IBV_LINK_LAYER_ETHERNET : IBV_LINK_LAYER_INFINIBAND;
  return 0;
}

int QueryGid(ibv_context* c, uint8_t port, int index, ibv_gid* gid) {
  Impl* f = FakeOf(c);
  Lock l(f->mu);
  auto it = f->ctxs.find(c);
  const FakeVerbs::Port* p = it == f->ctxs.end() ? nullptr : f->PortOf(it->second.dev, port);
  if (!p || index != 0) {
    errno = EINVAL;
    return -1;
  }
  std::memcpy(gid->raw, p->gid.data(), sizeof gid->raw);
  return 0;
}

ibv_pd* AllocPd(ibv_context* c) {
  Impl* f = FakeOf(c);
  Lock l(f->mu);
  if (!f->ctxs.count(c)) {
    f->Misuse("alloc_pd on an unknown context");
    errno = EINVAL;
    return nullptr;
  }
  ibv_pd* pd = f->Make<ibv_pd>(f);
  pd->context = c;
  f->pds[pd] = Impl::Pd{c};
  return pd;
}

int DeallocPd(ibv_pd* pd) {
  Impl* f = FakeOf(pd);
  Lock l(f->mu);
  if (!f->pds.count(pd)) return f->Misuse("dealloc_pd of an unknown PD"), EINVAL;
  for (const auto& [m, mr] : f->mrs)
    if (mr.pd == pd) return f->Misuse("dealloc_pd with an MR registered"), EBUSY;
  for (const auto& [q, qp] : f->qps)
    if (qp.pd == pd) return f->Misuse("dealloc_pd with a QP alive"), EBUSY;
  for (const auto& [a, ah] : f->ahs)
    if (ah.pd == pd) return f->Misuse("dealloc_pd with an AH alive"), EBUSY;
  f->pds.erase(pd);
  return 0;
}

ibv_mr* RegMr(ibv_pd* pd, void* addr, size_t length, int access) {
  Impl* f = FakeOf(pd);
  Lock l(f->mu);
  if (!f->pds.count(pd) || length == 0 || !addr) {
    if (!f->pds.count(pd)) f->Misuse("reg_mr on an unknown PD");
    errno = EINVAL;
    return nullptr;
  }
  ibv_mr* mr = f->Make<ibv_mr>(f);
  mr->context = pd->context;
  mr->pd = pd;
  mr->addr = addr;
  mr->length = length;
  mr->lkey = mr->rkey = f->next_key++;
  f->mrs[mr] = Impl::Mr{pd, reinterpret_cast<uintptr_t>(addr), length, access};
  return mr;
}

int DeregMr(ibv_mr* mr) {
  Impl* f = FakeOf(mr);
  Lock l(f->mu);
  if (!f->mrs.erase(mr)) return f->Misuse("dereg_mr of an unknown MR"), EINVAL;
  return 0;
}

ibv_comp_channel* CreateCompChannel(ibv_context* c) {
  Impl* f = FakeOf(c);
  Lock l(f->mu);
  if (!f->ctxs.count(c)) {
    errno = EINVAL;
    return nullptr;
  }
  // One readable count per event (EFD_SEMAPHORE): get_cq_event reads one at a time, and the fd
  // is blocking until its owner says otherwise, as the real channel's is.
  const int fd = eventfd(0, EFD_SEMAPHORE | EFD_CLOEXEC);
  if (fd < 0) return nullptr;
  ibv_comp_channel* ch = f->Make<ibv_comp_channel>(f);
  ch->context = c;
  ch->fd = fd;
  f->channels[ch] = Impl::Channel{fd, {}};
  return ch;
}

int DestroyCompChannel(ibv_comp_channel* ch) {
  Impl* f = FakeOf(ch);
  Lock l(f->mu);
  auto it = f->channels.find(ch);
  if (it == f->channels.end()) return f->Misuse("destroy_comp_channel of an unknown channel"), EINVAL;
  for (const auto& [cq, x] : f->cqs)
    if (x.channel == ch) return f->Misuse("destroy_comp_channel with a CQ still on it"), EBUSY;
  close(it->second.fd);
  f->channels.erase(it);
  return 0;
}

ibv_cq* CreateCq(ibv_context* c, int cqe, void* cq_context, ibv_comp_channel* ch, int) {
  Impl* f = FakeOf(c);
  Lock l(f->mu);
  if (!f->ctxs.count(c) || cqe <= 0 || (ch && !f->channels.count(ch))) {
    errno = EINVAL;
    return nullptr;
  }
  ibv_cq* cq = f->Make<ibv_cq>(f);
  cq->context = c;
  cq->channel = ch;
  cq->cq_context = cq_context;
  cq->cqe = cqe;
  f->cqs[cq] = Impl::Cq{cqe, ch, {}, false, 0, 0};
  return cq;
}

int DestroyCq(ibv_cq* cq) {
  Impl* f = FakeOf(cq);
  Lock l(f->mu);
  auto it = f->cqs.find(cq);
  if (it == f->cqs.end()) return f->Misuse("destroy_cq of an unknown CQ"), EINVAL;
  for (const auto& [q, qp] : f->qps)
    if (qp.scq == cq || qp.rcq == cq) return f->Misuse("destroy_cq with a QP still using it"), EBUSY;
  if (it->second.events_got != it->second.events_acked)
    return f->Misuse("destroy_cq with channel events not acked (libibverbs would hang)"), EBUSY;
  if (it->second.channel) {  // events still queued for it on the channel are dropped
    auto& evs = f->channels[it->second.channel].events;
    evs.erase(std::remove(evs.begin(), evs.end(), cq), evs.end());
  }
  f->cqs.erase(it);
  return 0;
}

int ReqNotifyCq(ibv_cq* cq, int) {
  Impl* f = FakeOf(cq);
  Lock l(f->mu);
  auto it = f->cqs.find(cq);
  if (it == f->cqs.end()) return f->Misuse("req_notify_cq of an unknown CQ"), EINVAL;
  it->second.armed = true;
  return 0;
}

int GetCqEvent(ibv_comp_channel* ch, ibv_cq** cq, void** cq_context) {
  Impl* f = FakeOf(ch);
  int fd;
  {
    Lock l(f->mu);
    auto it = f->channels.find(ch);
    if (it == f->channels.end()) {
      f->Misuse("get_cq_event on an unknown channel");
      errno = EINVAL;
      return -1;
    }
    fd = it->second.fd;
  }
  uint64_t one;
  if (read(fd, &one, sizeof one) != sizeof one) return -1;  // errno: EAGAIN when non-blocking
  Lock l(f->mu);
  auto& evs = f->channels[ch].events;
  if (evs.empty()) {
    f->Misuse("a channel event with no CQ behind it");
    errno = EAGAIN;
    return -1;
  }
  *cq = evs.front();
  evs.pop_front();
  *cq_context = (*cq)->cq_context;
  ++f->cqs[*cq].events_got;
  return 0;
}

void AckCqEvents(ibv_cq* cq, unsigned int n) {
  Impl* f = FakeOf(cq);
  Lock l(f->mu);
  auto it = f->cqs.find(cq);
  if (it == f->cqs.end()) return f->Misuse("ack_cq_events of an unknown CQ");
  it->second.events_acked += n;
  if (it->second.events_acked > it->second.events_got) f->Misuse("ack_cq_events of more events than were got");
}

int PollCq(ibv_cq* cq, int n, ibv_wc* wc) {
  Impl* f = FakeOf(cq);
  Lock l(f->mu);
  auto it = f->cqs.find(cq);
  if (it == f->cqs.end()) return f->Misuse("poll_cq of an unknown CQ"), -1;
  int got = 0;
  auto& q = it->second.q;
  while (got < n && !q.empty()) {
    const Impl::Entry e = q.front();
    q.pop_front();
    wc[got++] = e.wc;
    if (e.send) {  // the provider frees the send queue up to this request only now
      auto qp = f->qps.find(e.qp);
      if (qp != f->qps.end()) {
        auto& sq = qp->second.sq;
        while (!sq.empty() && sq.front() <= e.serial) sq.pop_front();
      }
    }
  }
  return got;
}

ibv_qp* CreateQp(ibv_pd* pd, ibv_qp_init_attr* a) {
  Impl* f = FakeOf(pd);
  Lock l(f->mu);
  if (!f->pds.count(pd) || !f->cqs.count(a->send_cq) || !f->cqs.count(a->recv_cq)) {
    f->Misuse("create_qp with an unknown PD or CQ");
    errno = EINVAL;
    return nullptr;
  }
  if (a->qp_type != IBV_QPT_UD) {
    f->Misuse("create_qp: the fake models UD queue pairs only");
    errno = EOPNOTSUPP;
    return nullptr;
  }
  if (a->cap.max_send_wr == 0 || a->cap.max_send_wr > 16384 || a->cap.max_recv_wr > 16384 ||
      a->cap.max_send_sge > 4 || a->cap.max_recv_sge > 4) {
    errno = EINVAL;
    return nullptr;
  }
  ibv_qp* qp = f->Make<ibv_qp>(f);
  qp->context = pd->context;
  qp->qp_context = a->qp_context;
  qp->pd = pd;
  qp->send_cq = a->send_cq;
  qp->recv_cq = a->recv_cq;
  qp->qp_num = f->next_qpn++;
  qp->state = IBV_QPS_RESET;
  qp->qp_type = IBV_QPT_UD;
  Impl::Qp s{};
  s.pd = pd;
  s.scq = a->send_cq;
  s.rcq = a->recv_cq;
  s.cap = a->cap;
  s.sig_all = a->sq_sig_all != 0;
  s.dev = f->ctxs[pd->context].dev;
  f->qps[qp] = std::move(s);
  return qp;
}

int ModifyQp(ibv_qp* qp, ibv_qp_attr* a, int mask) {
  Impl* f = FakeOf(qp);
  Lock l(f->mu);
  auto it = f->qps.find(qp);
  if (it == f->qps.end()) return f->Misuse("modify_qp of an unknown QP"), EINVAL;
  Impl::Qp& q = it->second;
  const ibv_qp_state from = qp->state;
  const ibv_qp_state to = (mask & IBV_QP_STATE) ? a->qp_state : from;
  auto needs = [&](int m) { return (mask & m) == m; };
  bool ok = false;
  if (to == IBV_QPS_RESET || to == IBV_QPS_ERR) {
    ok = true;
  } else if (from == IBV_QPS_RESET && to == IBV_QPS_INIT) {
    ok = needs(IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY) && f->PortOf(q.dev, a->port_num) && a->pkey_index == 0;
  } else if (from == IBV_QPS_INIT && (to == IBV_QPS_INIT || to == IBV_QPS_RTR)) {
    ok = !(mask & ~(IBV_QP_STATE | IBV_QP_QKEY | IBV_QP_PKEY_INDEX | IBV_QP_PORT));
  } else if (from == IBV_QPS_RTR && to == IBV_QPS_RTS) {
    ok = needs(IBV_QP_SQ_PSN);
  } else if (from == IBV_QPS_RTS && to == IBV_QPS_RTS) {
    ok = !(mask & ~(IBV_QP_STATE | IBV_QP_QKEY));
  }
  if (!ok) return EINVAL;
  if (mask & IBV_QP_PORT) q.port = a->port_num;
  if (mask & IBV_QP_QKEY) q.qkey = a->qkey;
  qp->state = to;
  if (to == IBV_QPS_RESET) {
    q.rq.clear();
    q.sq.clear();
    q.sq_error = false;
  } else if (to == IBV_QPS_ERR) {
    f->Flush(qp, q);
  }
  return 0;
}

int DestroyQp(ibv_qp* qp) {
  Impl* f = FakeOf(qp);
  Lock l(f->mu);
  if (!f->qps.erase(qp)) return f->Misuse("destroy_qp of an unknown QP"), EINVAL;
  return 0;  // its multicast attachments go with it (as uverbs cleans them up)
}

int PostSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  Impl* f = FakeOf(qp);
  Lock l(f->mu);
  ++f->stats.post_send_calls;
  *bad = wr;
  if (f->fail_post_send) {
    const int e = f->fail_post_send;
    f->fail_post_send = 0;
    return e;
  }
  auto it = f->qps.find(qp);
  if (it == f->qps.end()) return f->Misuse("post_send on an unknown QP"), EINVAL;
  Impl::Qp& q = it->second;
  for (ibv_send_wr* w = wr; w; w = w->next) {
    *bad = w;
    if (qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_SQE && qp->state != IBV_QPS_ERR) return EINVAL;
    if (q.sq.size() >= q.cap.max_send_wr) return ENOMEM;  // the send queue is full
    if (w->opcode != IBV_WR_SEND || w->num_sge < 0 || static_cast<uint32_t>(w->num_sge) > q.cap.max_send_sge ||
        !f->ahs.count(w->wr.ud.ah))
      return f->Misuse("post_send: not a UD send with a live address handle"), EINVAL;
    const uint64_t serial = ++f->next_serial;
    q.sq.push_back(serial);
    f->Execute(qp, q, *w, serial);
  }
  *bad = nullptr;
  return 0;
}

int PostRecv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  Impl* f = FakeOf(qp);
  Lock l(f->mu);
  ++f->stats.post_recv_calls;
  *bad = wr;
  if (f->fail_post_recv) {
    const int e = f->fail_post_recv;
    f->fail_post_recv = 0;
    return e;
  }
  auto it = f->qps.find(qp);
  if (it == f->qps.end()) return f->Misuse("post_recv on an unknown QP"), EINVAL;
  Impl::Qp& q = it->second;
  for (ibv_recv_wr* w = wr; w; w = w->next) {
    *bad = w;
    if (qp->state == IBV_QPS_RESET) return EINVAL;
    if (q.rq.size() >= q.cap.max_recv_wr) return ENOMEM;
    if (w->num_sge < 0 || static_cast<uint32_t>(w->num_sge) > q.cap.max_recv_sge) return EINVAL;
    q.rq.push_back(Impl::Recv{w->wr_id, std::vector<ibv_sge>(w->sg_list, w->sg_list + w->num_sge)});
    if (qp->state == IBV_QPS_ERR) f->Flush(qp, q);  // a QP in error flushes what is posted
  }
  *bad = nullptr;
  return 0;
}

ibv_ah* CreateAh(ibv_pd* pd, ibv_ah_attr* a) {
  Impl* f = FakeOf(pd);
  Lock l(f->mu);
  if (!f->pds.count(pd) || !f->PortOf(f->ctxs[pd->context].dev, a->port_num) ||
      (a->is_global && a->grh.sgid_index != 0)) {
    errno = EINVAL;
    return nullptr;
  }
  ibv_ah* ah = f->Make<ibv_ah>(f);
  ah->context = pd->context;
  ah->pd = pd;
  f->ahs[ah] = Impl::Ah{pd, *a};
  return ah;
}

int DestroyAh(ibv_ah* ah) {
  Impl* f = FakeOf(ah);
  Lock l(f->mu);
  if (!f->ahs.erase(ah)) return f->Misuse("destroy_ah of an unknown AH"), EINVAL;
  return 0;
}

VerbsGid ToGid(const ibv_gid* g) {
  VerbsGid v;
  std::memcpy(v.data(), g->raw, v.size());
  return v;
}

int AttachMcast(ibv_qp* qp, const ibv_gid* gid, uint16_t) {
  Impl* f = FakeOf(qp);
  Lock l(f->mu);
  auto it = f->qps.find(qp);
  if (it == f->qps.end()) return f->Misuse("attach_mcast on an unknown QP"), EINVAL;
  if (gid->raw[0] != 0xff) return EINVAL;  // not a multicast GID
  it->second.groups.insert(ToGid(gid));    // twice is still one copy
  return 0;
}

int DetachMcast(ibv_qp* qp, const ibv_gid* gid, uint16_t) {
  Impl* f = FakeOf(qp);
  Lock l(f->mu);
  auto it = f->qps.find(qp);
  if (it == f->qps.end()) return f->Misuse("detach_mcast on an unknown QP"), EINVAL;
  return it->second.groups.erase(ToGid(gid)) ? 0 : EINVAL;
}

const char* WcStatusStr(ibv_wc_status s) {
  switch (s) {
    case IBV_WC_SUCCESS: return "success";
    case IBV_WC_LOC_LEN_ERR: return "local length error";
    case IBV_WC_LOC_QP_OP_ERR: return "local QP operation error";
    case IBV_WC_LOC_PROT_ERR: return "local protection error";
    case IBV_WC_WR_FLUSH_ERR: return "Work Request Flushed Error";
    case IBV_WC_GENERAL_ERR: return "general error";
    default: return "unknown";
  }
}

}  // namespace

// ---------------------------------------------------------------- the fabric

bool Impl::InMr(ibv_pd* pd, const ibv_sge& s, bool write) const {
  for (const auto& [m, mr] : mrs) {
    if (m->lkey != s.lkey) continue;
    return mr.pd == pd && s.addr >= mr.addr && s.addr + s.length <= mr.addr + mr.length &&
           (!write || (mr.access & IBV_ACCESS_LOCAL_WRITE));
  }
  return false;
}

void Impl::Push(ibv_cq* cq, const Entry& e) {
  auto it = cqs.find(cq);
  if (it == cqs.end()) return;  // destroyed under a live QP: misuse was recorded then
  Cq& c = it->second;
  if (c.q.size() >= static_cast<size_t>(c.cqe)) {
    Misuse("CQ overrun: more completions than its " + std::to_string(c.cqe) + " entries");
    return;
  }
  c.q.push_back(e);
  if (c.armed && c.channel) {  // one event per arm, as the hardware raises it
    c.armed = false;
    channels[c.channel].events.push_back(cq);
    const uint64_t one = 1;
    (void)!write(channels[c.channel].fd, &one, sizeof one);
    ++stats.events;
  }
}

void Impl::Flush(ibv_qp* qp, Qp& q) {
  while (!q.rq.empty()) {
    Entry e{};
    e.wc.wr_id = q.rq.front().wr_id;
    e.wc.status = IBV_WC_WR_FLUSH_ERR;
    e.wc.opcode = IBV_WC_RECV;
    e.wc.qp_num = qp->qp_num;
    e.qp = qp;
    q.rq.pop_front();
    Push(q.rcq, e);
  }
}

void Impl::Execute(ibv_qp* qp, Qp& q, const ibv_send_wr& w, uint64_t serial) {
  const bool signaled = q.sig_all || (w.send_flags & IBV_SEND_SIGNALED);
  ++stats.sends;
  stats.signaled += signaled;
  Entry done{};
  done.wc.wr_id = w.wr_id;
  done.wc.opcode = IBV_WC_SEND;
  done.wc.qp_num = qp->qp_num;
  done.qp = qp;
  done.serial = serial;
  done.send = true;
  ibv_wc_status status = IBV_WC_SUCCESS;
  if (q.sq_error || qp->state != IBV_QPS_RTS) {
    status = IBV_WC_WR_FLUSH_ERR;
  } else if (error_send != IBV_WC_SUCCESS) {
    status = error_send;
    error_send = IBV_WC_SUCCESS;
  } else {
    for (int i = 0; i < w.num_sge; ++i)
      if (!InMr(q.pd, w.sg_list[i], false)) status = IBV_WC_LOC_PROT_ERR;
  }
  if (status != IBV_WC_SUCCESS) {  // errors always complete, and stop the send queue
    if (status != IBV_WC_WR_FLUSH_ERR) {
      q.sq_error = true;
      qp->state = IBV_QPS_SQE;
    }
    done.wc.status = status;
    Push(q.scq, done);
    return;
  }
  std::vector<std::byte> msg;
  for (int i = 0; i < w.num_sge; ++i) {
    const auto* p = reinterpret_cast<const std::byte*>(w.sg_list[i].addr);
    msg.insert(msg.end(), p, p + w.sg_list[i].length);
  }
  const Ah& ah = ahs[w.wr.ud.ah];
  const Port* from = PortOf(q.dev, q.port);
  if (msg.size() > from->mtu) {
    ++stats.dropped_size;  // UD does not segment
  } else if (ah.attr.is_global && ah.attr.grh.dgid.raw[0] == 0xff && w.wr.ud.remote_qpn == kMulticastQpn) {
    const VerbsGid group = ToGid(&ah.attr.grh.dgid);
    bool any = false;
    for (auto& [to, r] : qps) {
      if (!r.groups.count(group) || (to == qp && !opt.multicast_loopback)) continue;
      any = true;
      Deliver(qp, q, ah.attr, w.wr.ud.remote_qkey, to, msg);
    }
    if (!any) ++stats.dropped_unrouted;
  } else {
    ibv_qp* to = nullptr;
    for (auto& [t, r] : qps) {
      const Port* p = PortOf(r.dev, r.port);
      if (t->qp_num != w.wr.ud.remote_qpn || !p) continue;
      const bool here = ah.attr.is_global ? ToGid(&ah.attr.grh.dgid) == p->gid : ah.attr.dlid == p->lid && !p->ethernet;
      if (here) to = t;
    }
    if (to) {
      Deliver(qp, q, ah.attr, w.wr.ud.remote_qkey, to, msg);
    } else {
      ++stats.dropped_unrouted;
    }
  }
  if (signaled) {
    done.wc.status = IBV_WC_SUCCESS;
    Push(q.scq, done);
  }
}

void Impl::Deliver(ibv_qp* from, Qp& s, const ibv_ah_attr& ah, uint32_t remote_qkey, ibv_qp* to,
                   const std::vector<std::byte>& msg) {
  Qp& r = qps[to];
  const uint32_t qkey = (remote_qkey & 0x80000000u) ? s.qkey : remote_qkey;
  if ((to->state != IBV_QPS_RTR && to->state != IBV_QPS_RTS && to->state != IBV_QPS_SQE) || qkey != r.qkey) {
    ++stats.dropped_unrouted;
    return;
  }
  if (r.rq.empty()) {
    ++stats.dropped_rnr;  // UD: no buffer, no message, no error anywhere
    return;
  }
  size_t room = 0;
  for (const ibv_sge& g : r.rq.front().sges) room += g.length;
  if (kGrhBytes + msg.size() > room) {
    ++stats.dropped_size;
    return;
  }
  const Recv rv = r.rq.front();
  r.rq.pop_front();
  Entry e{};
  e.wc.wr_id = rv.wr_id;
  e.wc.opcode = IBV_WC_RECV;
  e.wc.qp_num = to->qp_num;
  e.qp = to;
  ibv_wc_status status = IBV_WC_SUCCESS;
  if (error_recv != IBV_WC_SUCCESS) {
    status = error_recv;
    error_recv = IBV_WC_SUCCESS;
  } else {
    for (const ibv_sge& g : rv.sges)
      if (!InMr(r.pd, g, true)) status = IBV_WC_LOC_PROT_ERR;
  }
  if (status != IBV_WC_SUCCESS) {
    e.wc.status = status;
    Push(r.rcq, e);
    to->state = IBV_QPS_ERR;
    Flush(to, r);
    return;
  }
  // The GRH: an IB global route header when the sender used one, else 40 bytes of nothing in
  // particular (ibv_post_recv(3): "undefined") - a receiver must not read meaning into them.
  std::byte grh[kGrhBytes];
  std::memset(grh, 0xa5, sizeof grh);
  if (ah.is_global) {
    const Port* p = PortOf(s.dev, s.port);
    grh[0] = std::byte{0x60};
    grh[4] = std::byte(msg.size() >> 8);
    grh[5] = std::byte(msg.size() & 0xff);
    grh[6] = std::byte{0x1b};
    grh[7] = std::byte{ah.grh.hop_limit};
    std::memcpy(grh + 8, p->gid.data(), 16);
    std::memcpy(grh + 24, ah.grh.dgid.raw, 16);
  }
  std::vector<std::byte> all(grh, grh + kGrhBytes);
  all.insert(all.end(), msg.begin(), msg.end());
  size_t at = 0;
  for (const ibv_sge& g : rv.sges) {
    const size_t n = std::min<size_t>(g.length, all.size() - at);
    std::memcpy(reinterpret_cast<void*>(g.addr), all.data() + at, n);
    at += n;
  }
  e.wc.status = IBV_WC_SUCCESS;
  e.wc.byte_len = static_cast<uint32_t>(all.size());
  e.wc.src_qp = from->qp_num;
  e.wc.slid = PortOf(s.dev, s.port)->lid;
  e.wc.wc_flags = ah.is_global ? IBV_WC_GRH : 0;
  e.wc.sl = ah.sl;
  ++stats.delivered;
  Push(r.rcq, e);
}

// ---------------------------------------------------------------- FakeVerbs

Impl::Impl(Options o) : opt(std::move(o)) {
  for (const Device& d : opt.devices) {
    auto h = std::make_unique<Handle<ibv_device>>();
    std::memset(&h->ib, 0, sizeof h->ib);
    h->fake = this;
    std::snprintf(h->ib.name, sizeof h->ib.name, "%s", d.name.c_str());
    std::snprintf(h->ib.dev_name, sizeof h->ib.dev_name, "uverbs-%s", d.name.c_str());
    h->ib.node_type = IBV_NODE_CA;
    h->ib.transport_type = IBV_TRANSPORT_IB;
    devices.push_back(std::move(h));
  }
  {
    Lock l(g_slots_mu);
    for (int i = 0; i < kSlots && slot < 0; ++i)
      if (!g_slots[i]) slot = i;
    HS_CHECK(slot >= 0) << "more than " << kSlots << " FakeVerbs alive at once";
    g_slots[slot] = this;
  }
  api.device_list = kDeviceLists[slot];
  api.free_device_list = FreeDeviceList;
  api.device_name = DeviceName;
  api.open_device = OpenDevice;
  api.close_device = CloseDevice;
  api.query_port = QueryPort;
  api.query_gid = QueryGid;
  api.alloc_pd = AllocPd;
  api.dealloc_pd = DeallocPd;
  api.reg_mr = RegMr;
  api.dereg_mr = DeregMr;
  api.create_comp_channel = CreateCompChannel;
  api.destroy_comp_channel = DestroyCompChannel;
  api.create_cq = CreateCq;
  api.destroy_cq = DestroyCq;
  api.req_notify_cq = ReqNotifyCq;
  api.get_cq_event = GetCqEvent;
  api.ack_cq_events = AckCqEvents;
  api.poll_cq = PollCq;
  api.create_qp = CreateQp;
  api.modify_qp = ModifyQp;
  api.destroy_qp = DestroyQp;
  api.post_send = PostSend;
  api.post_recv = PostRecv;
  api.create_ah = CreateAh;
  api.destroy_ah = DestroyAh;
  api.attach_mcast = AttachMcast;
  api.detach_mcast = DetachMcast;
  api.wc_status_str = WcStatusStr;
}

Impl::~Impl() {
  {
    Lock l(g_slots_mu);
    g_slots[slot] = nullptr;
  }
  for (const auto& [ch, c] : channels) close(c.fd);
}

FakeVerbs::Options FakeVerbs::OneDevice() {
  Port p;
  p.gid[0] = 0xfe;
  p.gid[1] = 0x80;
  p.gid[15] = 1;
  Options o;
  o.devices.push_back(Device{"fake0", {p}});
  return o;
}

FakeVerbs::FakeVerbs(Options o) : impl_(std::make_unique<Impl>(std::move(o))) {}
FakeVerbs::~FakeVerbs() = default;

const VerbsApi* FakeVerbs::api() const { return &impl_->api; }

void FakeVerbs::FailNextPostSend(int err) {
  Lock l(impl_->mu);
  impl_->fail_post_send = err;
}
void FakeVerbs::FailNextPostRecv(int err) {
  Lock l(impl_->mu);
  impl_->fail_post_recv = err;
}
void FakeVerbs::ErrorNextSend(ibv_wc_status s) {
  Lock l(impl_->mu);
  impl_->error_send = s;
}
void FakeVerbs::ErrorNextReceive(ibv_wc_status s) {
  Lock l(impl_->mu);
  impl_->error_recv = s;
}

FakeVerbs::Stats FakeVerbs::stats() const {
  Lock l(impl_->mu);
  return impl_->stats;
}

std::vector<std::string> FakeVerbs::misuse() const {
  Lock l(impl_->mu);
  return impl_->misuse;
}

size_t FakeVerbs::live_objects() const {
  Lock l(impl_->mu);
  const Impl& f = *impl_;
  return f.ctxs.size() + f.pds.size() + f.mrs.size() + f.channels.size() + f.cqs.size() + f.qps.size() +
         f.ahs.size();
}

// ---------------------------------------------------------------- RawQp

FakeVerbs::RawQp::RawQp(FakeVerbs& fake, uint32_t qkey, const std::string& device, uint8_t port)
    : api_(fake.api()), port_(port), buf_(8192) {
  int n = 0;
  ibv_device** list = api_->device_list(&n);
  for (int i = 0; i < n; ++i)
    if (device == api_->device_name(list[i])) ctx_ = api_->open_device(list[i]);
  api_->free_device_list(list);
  HS_CHECK(ctx_) << "RawQp: no fake device " << device;
  ibv_port_attr pa;
  HS_CHECK(api_->query_port(ctx_, port_, &pa) == 0);
  ibv_gid gid;
  HS_CHECK(api_->query_gid(ctx_, port_, 0, &gid) == 0);
  pd_ = api_->alloc_pd(ctx_);
  cq_ = api_->create_cq(ctx_, 16, nullptr, nullptr, 0);
  ibv_qp_init_attr init{};
  init.send_cq = init.recv_cq = cq_;
  init.cap.max_send_wr = init.cap.max_recv_wr = 16;
  init.cap.max_send_sge = init.cap.max_recv_sge = 1;
  init.qp_type = IBV_QPT_UD;
  qp_ = api_->create_qp(pd_, &init);
  HS_CHECK(pd_ && cq_ && qp_);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = port_;
  a.qkey = qkey;
  HS_CHECK(api_->modify_qp(qp_, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY) == 0);
  a = {};
  a.qp_state = IBV_QPS_RTR;
  HS_CHECK(api_->modify_qp(qp_, &a, IBV_QP_STATE) == 0);
  a.qp_state = IBV_QPS_RTS;
  HS_CHECK(api_->modify_qp(qp_, &a, IBV_QP_STATE | IBV_QP_SQ_PSN) == 0);
  mr_ = api_->reg_mr(pd_, buf_.data(), buf_.size(), IBV_ACCESS_LOCAL_WRITE);
  HS_CHECK(mr_);
  me_.lid = pa.lid;
  std::memcpy(me_.gid.data(), gid.raw, 16);
  me_.qpn = qp_->qp_num;
}

FakeVerbs::RawQp::~RawQp() {
  api_->dereg_mr(mr_);
  api_->destroy_qp(qp_);
  api_->destroy_cq(cq_);
  api_->dealloc_pd(pd_);
  api_->close_device(ctx_);
}

VerbsAddress FakeVerbs::RawQp::address() const { return me_; }

bool FakeVerbs::RawQp::Send(const VerbsAddress& to, const std::vector<std::byte>& bytes, uint32_t qkey) {
  HS_CHECK_LE(bytes.size(), buf_.size());
  if (!bytes.empty()) std::memcpy(buf_.data(), bytes.data(), bytes.size());
  ibv_ah_attr aa{};
  aa.port_num = port_;
  aa.dlid = to.lid;
  if (to.lid == 0) {
    aa.is_global = 1;
    std::memcpy(aa.grh.dgid.raw, to.gid.data(), 16);
  }
  ibv_ah* ah = api_->create_ah(pd_, &aa);
  HS_CHECK(ah);
  ibv_sge sge{reinterpret_cast<uintptr_t>(buf_.data()), static_cast<uint32_t>(bytes.size()), mr_->lkey};
  ibv_send_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.ud.ah = ah;
  wr.wr.ud.remote_qpn = to.qpn;
  wr.wr.ud.remote_qkey = qkey;
  ibv_send_wr* bad = nullptr;
  bool ok = api_->post_send(qp_, &wr, &bad) == 0;
  ibv_wc wc{};
  ok = ok && api_->poll_cq(cq_, 1, &wc) == 1 && wc.status == IBV_WC_SUCCESS;  // the fake completes at once
  api_->destroy_ah(ah);
  return ok;
}

}  // namespace hogstream

#endif  // HOGSTREAM_VERBS
