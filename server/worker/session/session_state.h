// SessionState: everything one session has created, by kind, and its release. The tables are
// declared in the order their objects may depend on one another (memory before the pools,
// modules and functions carved from it; events and streams after); ReleaseAll() ends them in
// the reverse order, like rc_pingpong's teardown of verbs objects. Owned by the Executor;
// used by its single thread only.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "remora/memmgr/allocation_table.h"
#include "remora/memmgr/handle_table.h"
#include "worker/session/array_state.h"
#include "worker/backend/driver.h"
#include "worker/session/graph_state.h"
#include "worker/session/held_results.h"
#include "worker/session/lib_objects.h"

namespace remora::worker {

struct Stream {
  DStream stream = nullptr;
  int gpu = 0;
  unsigned flags = 0;  // cudaStreamNonBlocking or 0
  int priority = 0;    // as created (a migration creates it again with it)
};
struct Event {
  DEvent event = nullptr;
  int gpu = 0;
  unsigned flags = 0;
};
struct Module {
  DModule module = nullptr;
  int gpu = 0;
  std::string hash;        // hex
  uint64_t charged = 0;    // bytes charged to the tenant for its code and data
  std::vector<uint64_t> globals;  // its variables' addresses in allocations()
  uint64_t image_bytes = 0;       // held against the session's module-bytes limit
};
struct Function {
  DFunction function = nullptr;
  int gpu = 0;
  uint64_t module = 0;
  std::vector<ParamInfo> params;
};
struct Pool {
  DPool pool = nullptr;
  int gpu = 0;
  bool created = false;    // by this session (destroyed with it)
  uint64_t import_id = 0;  // imported from another session's export (allocations are opened, not made)
};
// Pinned host memory of the client mapped here (shm): DMA goes straight to and from it.
struct HostRegion {
  std::byte* base = nullptr;
  size_t size = 0;
  bool registered = false;  // with the driver (pinned); else copies are staged by the driver
  DevPtr device = 0;        // the device's address of it (a session allocation), or 0
};
// A host function waiting in a stream: the driver thread blocks in it until the client has
// run the callback. Shared between the executor and that thread.
struct HostCallback {
  uint64_t id = 0;
  std::atomic<bool> reached{false};
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
};

// The virtual memory API (cuMemCreate / cuMemAddressReserve / cuMemMap): physical memory,
// charged to the tenant until it is both released and unmapped; reserved ranges (also an
// allocation of kind kVirtual, so arguments inside them pass the pointer checks); mappings.
struct PhysicalMemory {
  uint64_t real = 0;   // the driver's CUmemGenericAllocationHandle
  int gpu = 0;
  uint64_t size = 0;
  int refs = 1;        // cuMemCreate and cuMemRetainAllocationHandle, less cuMemRelease
  int maps = 0;
  uint64_t charged = 0;    // this session's charge for it: `size` if created here, 0 if imported
  uint64_t import_id = 0;  // imported (cuMemImportFromShareableHandle): the IPC export it opened
};
struct Reservation {
  uint64_t size = 0;
  int gpu = 0;
};
struct Mapping {
  uint64_t size = 0;
  uint64_t physical = 0;  // session handle
};

class SessionState {
 public:
  SessionState() = default;
  SessionState(const SessionState&) = delete;
  SessionState& operator=(const SessionState&) = delete;

  // Every table mints its later handles in `window` (Hello.window, handle_table.h); set
  // before the session creates anything.
  void SetWindow(uint8_t window) {
    physical_.SetWindow(window);
    pools_.SetWindow(window);
    modules_.SetWindow(window);
    functions_.SetWindow(window);
    events_.SetWindow(window);
    streams_.SetWindow(window);
    graphs_.SetWindow(window);
    array_objects_.SetWindow(window);
  }

  AllocationTable& allocations() { return allocs_; }
  std::map<uint64_t, HostRegion>& host_regions() { return host_regions_; }
  HandleTable<Pool>& pools() { return pools_; }
  HandleTable<Module>& modules() { return modules_; }
  // Module handle already loaded for (hash, gpu).
  std::map<std::pair<std::string, int>, uint64_t>& module_index() { return module_index_; }
  HandleTable<Function>& functions() { return functions_; }
  // Function handle for (module, name).
  std::map<std::pair<uint64_t, std::string>, uint64_t>& function_index() { return function_index_; }
  HandleTable<Event>& events() { return events_; }
  HandleTable<Stream>& streams() { return streams_; }
  // The per-thread default stream of (client thread, gpu), created on first use.
  std::map<std::pair<uint64_t, int>, DStream>& per_thread_streams() { return per_thread_streams_; }
  std::map<uint64_t, std::shared_ptr<HostCallback>>& host_callbacks() { return host_callbacks_; }
  // Graphs, executable graphs, nodes, user objects and captures (graph_state.h).
  GraphTables& graphs() { return graphs_; }
  // Objects the math libraries created (released first: they use streams and memory).
  LibObjects& lib_objects() { return lib_objects_; }
  // Generated calls' results too large for one reply, until the client reads them.
  HeldResults& held_results() { return held_results_; }
  StagedArgs& staged_args() { return staged_args_; }
  // CUDA arrays, mipmapped arrays, texture and surface objects (array_state.h).
  ArrayTables& array_objects() { return array_objects_; }
  HandleTable<PhysicalMemory>& physical() { return physical_; }
  std::map<uint64_t, Reservation>& reservations() { return reservations_; }
  std::map<uint64_t, Mapping>& mappings() { return mappings_; }
  // GPU activity flushed from the driver that a reply had no room for yet (wire form of
  // protocol/api/activity_wire.h; hooks/activity_hooks.cc).
  std::string& activity_pending() { return activity_pending_; }
  // The allocation holding [ptr, ptr + len) (inside a reserved range, mapped bytes only).
  Result<Allocation> CheckRange(uint64_t ptr, uint64_t len) const { return allocs_.CheckRange(ptr, len); }

  // How ReleaseAll reaches the GPU and the ledger.
  struct Releaser {
    virtual ~Releaser() = default;
    virtual Status SetDevice(int gpu) = 0;
    virtual void ReleaseCharge(int gpu, uint64_t bytes) = 0;
    // Ends a library object through its library (its workspace and charges are the
    // caller's to return).
    virtual void DestroyLibraryObject(LibObject& object) = 0;
  };
  // Ends everything the session holds, newest kind first: waiting host callbacks are let go,
  // captures ended, executable graphs and graphs destroyed, library objects destroyed (their
  // workspaces freed, charges returned), streams and events destroyed, modules unloaded,
  // created pools destroyed, memory freed
  // (charges returned), client regions unregistered and unmapped. Idempotent.
  void ReleaseAll(Driver& driver, Releaser& releaser);
  // Lets every driver thread blocked in a host function go (the client will never run it):
  // first thing at a session's end, before anything waits for a stream. Idempotent.
  void ReleaseHostCallbacks();

 private:
  void ReleaseGraphs(Driver& driver, Releaser& releaser);

  // Declared in dependency order; released in reverse.
  AllocationTable allocs_;
  HandleTable<PhysicalMemory> physical_{HandleKind::kPhysical};
  std::map<uint64_t, Reservation> reservations_;
  std::map<uint64_t, Mapping> mappings_;
  std::string activity_pending_;
  std::map<uint64_t, HostRegion> host_regions_;
  HandleTable<Pool> pools_{HandleKind::kPool};
  HandleTable<Module> modules_{HandleKind::kModule};
  std::map<std::pair<std::string, int>, uint64_t> module_index_;
  HandleTable<Function> functions_{HandleKind::kFunction};
  std::map<std::pair<uint64_t, std::string>, uint64_t> function_index_;
  HandleTable<Event> events_{HandleKind::kEvent};
  HandleTable<Stream> streams_{HandleKind::kStream};
  std::map<std::pair<uint64_t, int>, DStream> per_thread_streams_;
  std::map<uint64_t, std::shared_ptr<HostCallback>> host_callbacks_;
  GraphTables graphs_;
  LibObjects lib_objects_;
  HeldResults held_results_;
  StagedArgs staged_args_;
  ArrayTables array_objects_;
};

}  // namespace remora::worker
