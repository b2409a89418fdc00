// IpcState: one session's CUDA IPC - the memory and events it exported (registered with the
// supervisor, which hands out the client's handles: server/supervisor/ipc_registry.h), what
// it opened of other sessions' exports, and the frees it deferred because other sessions
// still had the memory open. Physical memory of the virtual memory API (cuMemCreate) shared
// as a shareable handle follows the same rules, except that the driver itself keeps it alive
// for its importers: what is deferred is only its charge. Executor thread only.
#pragma once

#include <array>
#include <cstdint>
#include <map>

#include "remora/memmgr/allocation_table.h"
#include "worker/backend/driver.h"
#include "worker/session/ipc_link.h"

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
    bool pool_pointer = false;  // opened from an imported pool (cudaMemPoolImportPointer): freed, not closed
  };

  std::map<uint64_t, Export>& memory_exports() { return memory_exports_; }  // by allocation base
  std::map<DEvent, Export>& event_exports() { return event_exports_; }
  std::map<uint64_t, Import>& imports() { return imports_; }               // by address here
  std::map<uint64_t, Export>& physical_exports() { return physical_exports_; }  // by session handle
  std::map<uint64_t, Export>& pool_exports() { return pool_exports_; }          // by session pool handle
  // Exports this session holds (the session limit ipc-exports, worker/session/limits.h).
  uint64_t ExportCount() const {
    return memory_exports_.size() + event_exports_.size() + physical_exports_.size() + pool_exports_.size();
  }
  // Memory of this session another process may read or write too: exported memory,
  // physical memory or pools, or memory opened from another session's export.
  bool SharesMemory() const {
    return !memory_exports_.empty() || !imports_.empty() || !physical_exports_.empty() || !pool_exports_.empty();
  }
  // A pool of this session destroyed: an export of it is revoked; an import of one closed.
  void PoolDestroyed(Executor& ex, uint64_t handle, uint64_t import_id);

  // cudaFree of `a` (already out of the session's table): true when `a` was exported and is
  // still open in another session - then it stays allocated and charged until the
  // supervisor says the last importer closed it (Release).
  bool DeferFree(Executor& ex, const Allocation& a);
  // Physical memory `id` (this session's handle) of `bytes` on `gpu`, released and unmapped
  // here: true when it was exported and is still imported elsewhere - then its charge stays
  // until the supervisor says the last importer let go (Release).
  bool DeferPhysicalCharge(Executor& ex, uint64_t id, int gpu, uint64_t bytes);
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
  // Memory kept for its importers: an allocation to free, or (physical memory, which the
  // driver keeps for them) only a charge to release.
  struct Deferred {
    Allocation alloc;
    bool charge_only = false;
  };
  // `live`: the session still runs (a stream-ordered allocation's charge then goes to its
  // pool's kept memory, as its own free would have done).
  void FreeNow(Executor& ex, const Deferred& d, bool live);
  void ReleaseDeferred(Executor& ex, uint64_t export_id, bool live);
  // Asks the supervisor to revoke `export_id`: the opens left elsewhere (0 if it cannot say).
  uint32_t Unexport(Executor& ex, uint64_t export_id);

  std::map<uint64_t, Export> memory_exports_;
  std::map<DEvent, Export> event_exports_;
  std::map<uint64_t, Import> imports_;
  std::map<uint64_t, Export> physical_exports_;
  std::map<uint64_t, Export> pool_exports_;
  std::map<uint64_t, Deferred> deferred_;  // export id -> memory kept for its importers
};

}  // namespace remora::worker
