// Request handlers, one per member of wire::Request's union, grouped by family in
// ops_*.cc. Private to the worker. Each validates everything it receives against the
// session's own tables before touching the driver.
#pragma once

#include "worker/session/executor.h"
#include "worker/session/gpu_waits.h"

namespace remora::worker {

class Handlers {
 public:
  using Req = wire::Request::Reader;

  // ops_device.cc
  static Status GetDevices(Executor& ex, uint64_t tag, Req req);
  static Status MemGetInfo(Executor& ex, uint64_t tag, Req req);
  static Status DeviceSynchronize(Executor& ex, uint64_t tag, Req req);
  static Status DeviceReset(Executor& ex, uint64_t tag, Req req);

  // ops_memory.cc
  static Status MemAlloc(Executor& ex, uint64_t tag, Req req);
  static Status MemFree(Executor& ex, uint64_t tag, Req req);
  static Status Memset(Executor& ex, uint64_t tag, Req req);

  // ops_transfer.cc
  static Status MemcpyHtoD(Executor& ex, const InFrame& frame, Req req);
  static Status MemcpyDtoH(Executor& ex, uint64_t tag, Req req);
  static Status MemcpyDtoD(Executor& ex, uint64_t tag, Req req);

  // ops_sync.cc

  // ops_memory.cc
  static Status Memset3D(Executor& ex, uint64_t tag, Req req);
  static Status MallocAsync(Executor& ex, uint64_t tag, Req req);
  static Status FreeAsync(Executor& ex, uint64_t tag, Req req);

  // ops_transfer.cc
  static Status Copy3D(Executor& ex, const InFrame& frame, Req req);

  static Status RegisterHostRegion(Executor& ex, uint64_t tag, Req req);
  static Status UnregisterHostRegion(Executor& ex, uint64_t tag, Req req);

  // ops_module.cc
  static Status ModuleLoad(Executor& ex, const InFrame& frame, Req req);
  static Status GetFunction(Executor& ex, uint64_t tag, Req req);
  static Status GetGlobal(Executor& ex, uint64_t tag, Req req);
  static Status LaunchKernel(Executor& ex, uint64_t tag, Req req);

  // ops_migrate.cc, ops_module.cc: planned migration (source, then target)
  static Status MigrateExport(Executor& ex, uint64_t tag, Req req);
  static Status MigrateImport(Executor& ex, uint64_t tag, Req req);
  static Status MigrateModule(Executor& ex, const InFrame& frame, Req req);

  // ops_link.cc
  static Status Link(Executor& ex, uint64_t tag, Req req);

  // ops_sync.cc (host callbacks)
  static Status HostFunc(Executor& ex, uint64_t tag, Req req);
  static Status CallbackDone(Executor& ex, uint64_t tag, Req req);

  // ops_capture.cc: a copy between host memory the worker cannot reach and device memory,
  // issued on capturing stream `s`: bound to a device staging buffer the client refreshes or
  // drains around each launch of the graph (graph_state.h).
  static Status CaptureHostCopy(Executor& ex, const Executor::Stream& s, uint64_t client_addr, DevPtr device,
                                uint64_t n, bool to_device);
  // cudaMallocAsync / cudaFreeAsync on capturing stream `s`: the driver makes an allocation
  // or free node; the memory is the capture's graph's (AllocKind::kGraphMemory, charged while
  // the graph lives, like a hand-made allocation node's).
  static Status CapturedMallocAsync(Executor& ex, uint64_t tag, const Executor::Stream& s, int gpu, DPool pool,
                                    uint64_t size);
  static Status CapturedFreeAsync(Executor& ex, uint64_t tag, const Executor::Stream& s, const Allocation& a);

  // graph_host_sync.cc: host nodes of executable graphs that stage host memory (HostNodeSync).
  // Records the host nodes of executable graph `exec_id`, instantiated from driver graph
  // `graph` (GraphExec::host_nodes), and, where the graph stages host memory, gives them the
  // trampoline that moves that memory around them.
  static Status SetUpHostNodeSync(Executor& ex, uint64_t exec_id, void* graph);
  // A launch reached the node: its preceding copies' staging is read, then the client told.
  static Status AnnounceHostNode(Executor& ex, const HostNodeSync& sync);
  // The client ran the node's function (a control request, like CallbackDone).
  static Status GraphHostNodeDone(Executor& ex, Req req);
};

}  // namespace remora::worker
