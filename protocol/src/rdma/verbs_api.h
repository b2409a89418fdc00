// Run-time binding to libibverbs.so.1 and librdmacm.so.1.
//
// The RDMA transport is linked into the shim (loaded into arbitrary applications, on machines
// that may lack rdma-core) and into the server (which must start where no RDMA exists), so
// nothing links against the verbs libraries: they are dlopen()ed on first use and called
// through this table. Only the exported functions are here; the data-path calls
// (ibv_post_send, ibv_post_recv, ibv_poll_cq, ibv_req_notify_cq) are inline in verbs.h and
// go through the provider's ops table, so they need no symbol.
//
// Thread-safety: LoadVerbs is safe to call from any thread; the table is immutable once
// loaded and never unloaded (providers keep references into the libraries).
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <string>

namespace remora::rdma {

// X(member, symbol): member names drop the library prefix, because verbs.h defines some
// symbols (ibv_reg_mr, ibv_get_device_list) as function-like macros.
#define REMORA_IBVERBS_FUNCTIONS(X)              \
  X(get_device_list, ibv_get_device_list)        \
  X(free_device_list, ibv_free_device_list)      \
  X(get_device_name, ibv_get_device_name)        \
  X(query_device, ibv_query_device)              \
  X(alloc_pd, ibv_alloc_pd)                      \
  X(dealloc_pd, ibv_dealloc_pd)                  \
  X(reg_mr, ibv_reg_mr)                          \
  X(dereg_mr, ibv_dereg_mr)                      \
  X(create_comp_channel, ibv_create_comp_channel) \
  X(destroy_comp_channel, ibv_destroy_comp_channel) \
  X(create_cq, ibv_create_cq)                    \
  X(destroy_cq, ibv_destroy_cq)                  \
  X(get_cq_event, ibv_get_cq_event)              \
  X(ack_cq_events, ibv_ack_cq_events)            \
  X(wc_status_str, ibv_wc_status_str)

#define REMORA_RDMACM_FUNCTIONS(X)                     \
  X(create_event_channel, rdma_create_event_channel)   \
  X(destroy_event_channel, rdma_destroy_event_channel) \
  X(create_id, rdma_create_id)                         \
  X(destroy_id, rdma_destroy_id)                       \
  X(bind_addr, rdma_bind_addr)                         \
  X(listen, rdma_listen)                               \
  X(resolve_addr, rdma_resolve_addr)                   \
  X(resolve_route, rdma_resolve_route)                 \
  X(connect, rdma_connect)                             \
  X(accept, rdma_accept)                               \
  X(reject, rdma_reject)                               \
  X(disconnect, rdma_disconnect)                       \
  X(get_cm_event, rdma_get_cm_event)                   \
  X(ack_cm_event, rdma_ack_cm_event)                   \
  X(event_str, rdma_event_str)                         \
  X(create_qp, rdma_create_qp)                         \
  X(destroy_qp, rdma_destroy_qp)                       \
  X(get_src_port, rdma_get_src_port)                   \
  X(migrate_id, rdma_migrate_id)

struct VerbsApi {
#define REMORA_DECLARE_MEMBER(member, symbol) decltype(&::symbol) member = nullptr;
  REMORA_IBVERBS_FUNCTIONS(REMORA_DECLARE_MEMBER)
  REMORA_RDMACM_FUNCTIONS(REMORA_DECLARE_MEMBER)
#undef REMORA_DECLARE_MEMBER
};

// The table, or nullptr when a library or one of its symbols is missing; then `why` (if
// given) gets one line such as "librdmacm.so.1 not found (install rdma-core)". Loads once.
const VerbsApi* LoadVerbs(std::string* why = nullptr);

// The loaded table. Only for code that runs after a successful LoadVerbs (every verbs
// object exists only then).
const VerbsApi& Verbs();

// Empty when an RDMA device can be used here, else one line why not, e.g.
// "no RDMA device (ibv_get_device_list: Function not implemented)". Not cached: devices can
// appear at run time (rdma link add).
std::string RdmaDeviceProblem();

}  // namespace remora::rdma
