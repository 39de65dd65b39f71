// The seam between the verbs backend and libibverbs: a table of function pointers covering
// exactly the verbs calls transport/verbs/ makes, under our own names, with verbs' own types
// (from the rdma-core headers). The backend calls nothing else, so a test double can stand in
// for the whole library (test/transport/verbs/fake_verbs.hpp) and the backend's logic runs in
// CI on hosts with no RDMA device at all.
// Not for: rdma_cm (address resolution, the subnet administrator's multicast join): the
// backend does not use it yet (see endpoint.hpp, "Not for"), so the seam leaves it out; and not
// for extended verbs (ibv_qp_ex, ibv_cq_ex), which the backend does not need.
//
// System(): the table over the real library, loaded at run time with dlopen("libibverbs.so.1")
// as NCCL does, never linked: the hogstream binary starts on hosts without rdma-core, and the
// verbs backend then answers one line (its `unavailable` says why). ibv_post_send,
// ibv_post_recv, ibv_poll_cq and ibv_req_notify_cq are static inline in verbs.h (they call
// through the context's ops); System() points at small functions of ours, compiled against the
// headers, that call those inline versions.
// Threads: a table is immutable once made; its functions are as thread-safe as libibverbs'.
#pragma once

#include <infiniband/verbs.h>

namespace hogstream {

struct VerbsApi {
  // nullptr: the table is usable. Else one line saying why not ("libibverbs.so.1: cannot open
  // shared object file ..."); every function pointer is then null.
  const char* unavailable = nullptr;

  // Devices and ports.
  ibv_device** (*device_list)(int* count) = nullptr;         // ibv_get_device_list
  void (*free_device_list)(ibv_device** list) = nullptr;     // ibv_free_device_list
  const char* (*device_name)(ibv_device* dev) = nullptr;     // ibv_get_device_name
  ibv_context* (*open_device)(ibv_device* dev) = nullptr;    // ibv_open_device
  int (*close_device)(ibv_context* ctx) = nullptr;           // ibv_close_device
  int (*query_port)(ibv_context* ctx, uint8_t port, ibv_port_attr* attr) = nullptr;  // ibv_query_port
  int (*query_gid)(ibv_context* ctx, uint8_t port, int index, ibv_gid* gid) = nullptr;  // ibv_query_gid

  // Protection domain and memory regions.
  ibv_pd* (*alloc_pd)(ibv_context* ctx) = nullptr;           // ibv_alloc_pd
  int (*dealloc_pd)(ibv_pd* pd) = nullptr;                   // ibv_dealloc_pd
  ibv_mr* (*reg_mr)(ibv_pd* pd, void* addr, size_t length, int access) = nullptr;  // ibv_reg_mr
  int (*dereg_mr)(ibv_mr* mr) = nullptr;                     // ibv_dereg_mr

  // Completion queues and the completion channel behind wait_fd().
  ibv_comp_channel* (*create_comp_channel)(ibv_context* ctx) = nullptr;  // ibv_create_comp_channel
  int (*destroy_comp_channel)(ibv_comp_channel* ch) = nullptr;           // ibv_destroy_comp_channel
  ibv_cq* (*create_cq)(ibv_context* ctx, int cqe, void* cq_context, ibv_comp_channel* ch,
                       int comp_vector) = nullptr;           // ibv_create_cq
  int (*destroy_cq)(ibv_cq* cq) = nullptr;                   // ibv_destroy_cq
  int (*req_notify_cq)(ibv_cq* cq, int solicited_only) = nullptr;  // ibv_req_notify_cq (inline)
  int (*get_cq_event)(ibv_comp_channel* ch, ibv_cq** cq, void** cq_context) = nullptr;  // ibv_get_cq_event
  void (*ack_cq_events)(ibv_cq* cq, unsigned int count) = nullptr;  // ibv_ack_cq_events
  int (*poll_cq)(ibv_cq* cq, int count, ibv_wc* wc) = nullptr;     // ibv_poll_cq (inline)

  // The UD queue pair and its address handles.
  ibv_qp* (*create_qp)(ibv_pd* pd, ibv_qp_init_attr* attr) = nullptr;  // ibv_create_qp
  int (*modify_qp)(ibv_qp* qp, ibv_qp_attr* attr, int mask) = nullptr;  // ibv_modify_qp
  int (*destroy_qp)(ibv_qp* qp) = nullptr;                             // ibv_destroy_qp
  int (*post_send)(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) = nullptr;  // ibv_post_send (inline)
  int (*post_recv)(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) = nullptr;  // ibv_post_recv (inline)
  ibv_ah* (*create_ah)(ibv_pd* pd, ibv_ah_attr* attr) = nullptr;      // ibv_create_ah
  int (*destroy_ah)(ibv_ah* ah) = nullptr;                             // ibv_destroy_ah
  int (*attach_mcast)(ibv_qp* qp, const ibv_gid* gid, uint16_t lid) = nullptr;  // ibv_attach_mcast
  int (*detach_mcast)(ibv_qp* qp, const ibv_gid* gid, uint16_t lid) = nullptr;  // ibv_detach_mcast

  const char* (*wc_status_str)(ibv_wc_status status) = nullptr;  // ibv_wc_status_str

  // The table over the real libibverbs, loaded once (thread-safe) on first use and kept for the
  // process's life (a dlopen'ed library is process-wide anyway). Never null; check
  // `unavailable`.
  static const VerbsApi* System();
};

}  // namespace hogstream
