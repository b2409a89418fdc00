// IpcState: one session's CUDA IPC - the memory and events it exported (registered with the
// supervisor, which hands out the client's handles: server/supervisor/ipc_registry.h), what
// it opened of other sessions' exports, and the frees it deferred because other sessions
// still had the memory open. Executor thread only.
#pragma once

#include <array>
#include <cstdint>
#include <map>

#include "remora/memmgr/allocation_table.h"
#include "worker/driver.h"
#include "worker/ipc_link.h"

namespace remora::worker {

class Executor;

using IpcHandleBytes = std::array<uint8_t, kIpcHandleBytes>;

class IpcState {
 public:
  struct Export {
    uint64_t export_id = 0;
    IpcHandleBytes handle{};
  };
  struct Import {
    uint64_t export_id = 0;
    uint64_t size = 0;
    int gpu = 0;
    uint32_t refs = 1;  // opens of the same handle by this session share one mapping
    IpcHandleBytes handle{};
  };

  std::map<uint64_t, Export>& memory_exports() { return memory_exports_; }  // by allocation base
  std::map<DEvent, Export>& event_exports() { return event_exports_; }
  std::map<uint64_t, Import>& imports() { return imports_; }               // by address here

  // cudaFree of `a` (already out of the session's table): true when `a` was exported and is
  // still open in another session - then it stays allocated and charged until the
  // supervisor says the last importer closed it (Release).
  bool DeferFree(Executor& ex, const Allocation& a);
  // The destruction of event `e`: if this session exported it, the export is revoked (no
  // new opens; the opens made keep their events).
  void EventDestroyed(Executor& ex, DEvent e);
  // The supervisor's word that the deferred free of `export_id` may happen now.
  void Release(Executor& ex, uint64_t export_id);
  // The session's end, before its objects are released: opens are closed; exported memory
  // still open elsewhere is taken out of the session's table (so it is not freed).
  void Teardown(Executor& ex);
  // After the session's objects are released: keeps the process (and its context) alive
  // until every deferred free was released, or the supervisor is gone.
  void Linger(Executor& ex);

 private:
  void FreeNow(Executor& ex, const Allocation& a);

  std::map<uint64_t, Export> memory_exports_;
  std::map<DEvent, Export> event_exports_;
  std::map<uint64_t, Import> imports_;
  std::map<uint64_t, Allocation> deferred_;  // export id -> memory kept for its importers
};

}  // namespace remora::worker
