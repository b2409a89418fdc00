#include "worker/session/session_state.h"

#include <sys/mman.h>

#include "remora/base/log.h"
#include "remora/base/util.h"
#include "cuda_api.h"

namespace remora::worker {

void SessionState::ReleaseGraphs(Driver& driver, Releaser& r) {
  GraphTables& g = graphs_;
  gen::cuda::Api& api = driver.cuda();
  // Captures in progress end (their graphs are then the session's to destroy).
  for (auto& [stream, capture] : g.captures()) {
    CUgraph graph = nullptr;
    if (api.cuStreamEndCapture(static_cast<CUstream>(stream), &graph) == CUDA_SUCCESS && graph != nullptr)
      (void)api.cuGraphDestroy(graph);
  }
  g.captures().clear();
  g.execs().ForEach([&](uint64_t, GraphExec& e) {
    if (r.SetDevice(e.gpu).ok()) (void)api.cuGraphExecDestroy(static_cast<CUgraphExec>(e.exec));
  });
  g.execs().Clear();
  // Graphs the application owns; a node's graphs go with it, a capture's were ended above.
  g.graphs().ForEach([&](uint64_t, Graph& graph) {
    if (graph.owned && graph.parent == 0 && r.SetDevice(graph.gpu).ok()) (void)api.cuGraphDestroy(static_cast<CUgraph>(graph.graph));
  });
  for (auto& [gpu, s] : g.sync_streams())
    if (r.SetDevice(gpu).ok()) (void)driver.StreamDestroy(s);
  g.sync_streams().clear();
  g.Clear();  // user objects: their references are the driver's to drop with the context
}

void SessionState::ReleaseHostCallbacks() {
  for (auto& [id, cb] : host_callbacks_) {
    std::lock_guard<std::mutex> lock(cb->mu);
    cb->done = true;
    cb->cv.notify_all();
  }
  host_callbacks_.clear();
  graphs_.ReleaseCallbacks();  // a graph's host functions too
}

void SessionState::ReleaseAll(Driver& driver, Releaser& r) {
  // Driver threads blocked in host functions must not wait for a client that is gone.
  ReleaseHostCallbacks();
  // Graphs (which may hold library kernels and their workspaces) before library objects.
  ReleaseGraphs(driver, r);
  // Library objects (handles, plans, descriptors) before the streams they were bound to.
  for (auto& o : lib_objects_.TakeAll()) {
    if (r.SetDevice(o->gpu).ok()) {
      r.DestroyLibraryObject(*o);
      if (o->workspace != 0) (void)driver.MemFree(o->workspace);
    }
    r.ReleaseCharge(o->gpu, o->workspace_bytes + o->charged);
  }
  // Texture and surface objects, arrays and mipmapped arrays (issue 14).
  array_objects_.ReleaseAll(driver.cuda(), [&](int gpu) { return r.SetDevice(gpu).ok(); },
                            [&](int gpu, uint64_t bytes) { r.ReleaseCharge(gpu, bytes); });
  for (auto& [key, s] : per_thread_streams_)
    if (r.SetDevice(key.second).ok()) (void)driver.StreamDestroy(s);
  per_thread_streams_.clear();
  streams_.ForEach([&](uint64_t, Stream& s) {
    if (r.SetDevice(s.gpu).ok()) (void)driver.StreamDestroy(s.stream);
  });
  streams_.Clear();
  events_.ForEach([&](uint64_t, Event& e) {
    if (r.SetDevice(e.gpu).ok()) (void)driver.EventDestroy(e.event);
  });
  events_.Clear();
  function_index_.clear();
  functions_.Clear();  // they go with their modules
  modules_.ForEach([&](uint64_t, Module& m) {
    if (r.SetDevice(m.gpu).ok()) (void)driver.ModuleUnload(m.module);
    r.ReleaseCharge(m.gpu, m.charged);
  });
  modules_.Clear();
  module_index_.clear();
  pools_.ForEach([&](uint64_t, Pool& p) {
    if (p.created && r.SetDevice(p.gpu).ok()) (void)driver.MemPoolDestroy(p.pool);
  });
  pools_.Clear();
  for (auto& [id, region] : host_regions_) {
    // Work still queued on it (released above, or never waited for) finds it mapped.
    if (region.registered) driver.HostUnregisterAndUnmap(region.base, region.size);
    else ::munmap(region.base, region.size);
  }
  host_regions_.clear();
  // The virtual memory API's objects: mappings, then physical memory, then the ranges.
  gen::cuda::Api& api = driver.cuda();
  for (auto& [ptr, m] : mappings_) {
    if (PhysicalMemory* p = physical_.Find(m.physical); p && r.SetDevice(p->gpu).ok()) (void)api.cuMemUnmap(ptr, m.size);
  }
  mappings_.clear();
  physical_.ForEach([&](uint64_t, PhysicalMemory& p) {
    if (r.SetDevice(p.gpu).ok())
      for (int i = 0; i < p.refs; i++) (void)api.cuMemRelease(p.real);
    r.ReleaseCharge(p.gpu, p.charged);
  });
  physical_.Clear();
  for (auto& [base, res] : reservations_)
    if (r.SetDevice(res.gpu).ok()) (void)api.cuMemAddressFree(base, res.size);
  reservations_.clear();
  uint64_t left = 0;
  size_t count = 0;
  for (const Allocation& a : allocs_.All()) {
    if (a.kind == AllocKind::kModule || a.kind == AllocKind::kVirtual || a.kind == AllocKind::kMappedHost ||
        a.kind == AllocKind::kIpcImported)
      continue;  // released above, or with its module, host region or IPC open
    // A graph's memory goes with the graph (the driver's); everything else is freed here.
    if (a.kind != AllocKind::kGraphMemory && r.SetDevice(a.device).ok()) (void)driver.MemFree(a.base);
    r.ReleaseCharge(a.device, a.reserved);
    left += a.size;
    count++;
  }
  if (count > 0) LOG_INFO("released {} in {} allocation(s) the client left behind", FormatSize(left), count);
  allocs_.Clear();
}

}  // namespace remora::worker
