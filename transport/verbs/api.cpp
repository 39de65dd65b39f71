// VerbsApi::System(): libibverbs loaded with dlopen, its entry points looked up by name, and
// our wrappers around the calls verbs.h makes static inline (see api.hpp).
#include "transport/verbs/api.hpp"

#include <dlfcn.h>

#include <cstddef>
#include <cstring>
#include <string>

namespace hogstream {

namespace {

// ibv_query_port's exported symbol fills only the old (compat) part of ibv_port_attr; verbs.h
// calls the provider's newer op when it has one and falls back to the symbol. Written once,
// while System()'s table is built, before anyone can call QueryPort.
int (*compat_query_port)(ibv_context*, uint8_t, _compat_ibv_port_attr*) = nullptr;

// Our wrappers: these four are static inline in verbs.h (a call through ctx->ops), so there is
// no symbol to dlsym; compiling them here against the headers is what the headers intend.
int PostSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) { return ibv_post_send(qp, wr, bad); }
int PostRecv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) { return ibv_post_recv(qp, wr, bad); }
int PollCq(ibv_cq* cq, int n, ibv_wc* wc) { return ibv_poll_cq(cq, n, wc); }
int ReqNotifyCq(ibv_cq* cq, int solicited_only) { return ibv_req_notify_cq(cq, solicited_only); }

// verbs.h's ___ibv_query_port, without its link-time reference to the exported symbol.
int QueryPort(ibv_context* ctx, uint8_t port, ibv_port_attr* attr) {
  verbs_context* v = verbs_get_ctx(ctx);
  if (v && v->sz >= sizeof(*v) - offsetof(verbs_context, query_port) && v->query_port)
    return v->query_port(ctx, port, attr, sizeof *attr);
  std::memset(attr, 0, sizeof *attr);
  return compat_query_port(ctx, port, reinterpret_cast<_compat_ibv_port_attr*>(attr));
}

// Holds the reason text for a table that could not be made (the table points into it).
struct Loaded {
  VerbsApi api;
  std::string why;
};

template <class F>
bool Sym(void* lib, const char* name, F* out, std::string* why) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  if (!*out && why->empty()) *why = std::string("libibverbs.so.1 has no ") + name + " (rdma-core too old?)";
  return *out != nullptr;
}

// Fills *l in place: `unavailable` points into l->why, so the Loaded must not move afterwards.
void Load(Loaded* l) {
  // Kept open for the process's life: providers and every object made through it live in it.
  void* lib = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = dlerror();
    l->why = std::string("cannot load libibverbs.so.1 (") + (e ? e : "unknown dlopen error") +
            "): is rdma-core (libibverbs1) installed?";
    l->api.unavailable = l->why.c_str();
    return;
  }
  VerbsApi a;
  std::string why;
  Sym(lib, "ibv_get_device_list", &a.device_list, &why);
  Sym(lib, "ibv_free_device_list", &a.free_device_list, &why);
  Sym(lib, "ibv_get_device_name", &a.device_name, &why);
  Sym(lib, "ibv_open_device", &a.open_device, &why);
  Sym(lib, "ibv_close_device", &a.close_device, &why);
  Sym(lib, "ibv_query_port", &compat_query_port, &why);
  Sym(lib, "ibv_query_gid", &a.query_gid, &why);
  Sym(lib, "ibv_alloc_pd", &a.alloc_pd, &why);
  Sym(lib, "ibv_dealloc_pd", &a.dealloc_pd, &why);
  Sym(lib, "ibv_reg_mr", &a.reg_mr, &why);
  Sym(lib, "ibv_dereg_mr", &a.dereg_mr, &why);
  Sym(lib, "ibv_create_comp_channel", &a.create_comp_channel, &why);
  Sym(lib, "ibv_destroy_comp_channel", &a.destroy_comp_channel, &why);
  Sym(lib, "ibv_create_cq", &a.create_cq, &why);
  Sym(lib, "ibv_destroy_cq", &a.destroy_cq, &why);
  Sym(lib, "ibv_get_cq_event", &a.get_cq_event, &why);
  Sym(lib, "ibv_ack_cq_events", &a.ack_cq_events, &why);
  Sym(lib, "ibv_create_qp", &a.create_qp, &why);
  Sym(lib, "ibv_modify_qp", &a.modify_qp, &why);
  Sym(lib, "ibv_destroy_qp", &a.destroy_qp, &why);
  Sym(lib, "ibv_create_ah", &a.create_ah, &why);
  Sym(lib, "ibv_destroy_ah", &a.destroy_ah, &why);
  Sym(lib, "ibv_attach_mcast", &a.attach_mcast, &why);
  Sym(lib, "ibv_detach_mcast", &a.detach_mcast, &why);
  Sym(lib, "ibv_wc_status_str", &a.wc_status_str, &why);
  if (!why.empty()) {
    l->why = why;
    l->api.unavailable = l->why.c_str();
    return;
  }
  a.query_port = QueryPort;
  a.post_send = PostSend;
  a.post_recv = PostRecv;
  a.poll_cq = PollCq;
  a.req_notify_cq = ReqNotifyCq;
  l->api = a;
}

}  // namespace

const VerbsApi* VerbsApi::System() {
  static const Loaded* loaded = [] {  // never freed: the library stays loaded too
    auto* l = new Loaded;
    Load(l);
    return l;
  }();
  return &loaded->api;
}

}  // namespace hogstream
