#include "worker/ipc/ipc_state.h"

#include <vector>

#include "remora/base/log.h"
#include "remora/base/util.h"
#include "worker/session/executor.h"
#include "worker/session/gpu_waits.h"
#include "worker/session/peer_log.h"

namespace remora::worker {

uint32_t IpcState::Unexport(Executor& ex, uint64_t export_id) {
  if (ex.control() == nullptr) return 0;
  IpcQuestion q;
  q.op = IpcQuestion::Op::kUnexport;
  q.id = export_id;
  auto answer = ex.control()->Ask(q, -1);
  if (!answer.ok() || answer->status != 0) return 0;
  return answer->importers;
}

bool IpcState::DeferFree(Executor& ex, const Allocation& a) {
  auto it = memory_exports_.find(a.base);
  if (it == memory_exports_.end()) return false;
  uint64_t id = it->second.export_id;
  memory_exports_.erase(it);
  uint32_t importers = Unexport(ex, id);
  if (importers == 0) return false;
  LOG_PEER(PeerLog(), Info,
           "session {}: 0x{:x} ({}) freed while open in {} other session(s): kept, and charged, until they close it",
           ex.config().session_id, a.base, FormatSize(a.size), importers);
  deferred_[id] = Deferred{a, false};
  return true;
}

bool IpcState::DeferPhysicalCharge(Executor& ex, uint64_t id, int gpu, uint64_t bytes) {
  auto it = physical_exports_.find(id);
  if (it == physical_exports_.end()) return false;
  uint64_t export_id = it->second.export_id;
  physical_exports_.erase(it);
  uint32_t importers = Unexport(ex, export_id);
  if (importers == 0) return false;
  LOG_PEER(PeerLog(), Info,
           "session {}: physical memory of {} released while imported by {} other session(s): charged until they "
           "release it", ex.config().session_id, FormatSize(bytes), importers);
  Deferred d;
  d.alloc.device = gpu;
  d.alloc.size = bytes;
  d.alloc.reserved = bytes;
  d.charge_only = true;
  deferred_[export_id] = d;
  return true;
}

void IpcState::EventDestroyed(Executor& ex, DEvent e) {
  auto it = event_exports_.find(e);
  if (it == event_exports_.end()) return;
  uint64_t id = it->second.export_id;
  event_exports_.erase(it);
  if (ex.control() == nullptr) return;
  IpcQuestion q;
  q.op = IpcQuestion::Op::kUnexport;
  q.id = id;
  auto answer = ex.control()->Ask(q, -1);
  if (!answer.ok() || answer->status != 0)
    LOG_WARN("session {}: the supervisor did not revoke IPC event export {}", ex.config().session_id, id);
}

void IpcState::FreeNow(Executor& ex, const Deferred& d, bool live) {
  const Allocation& a = d.alloc;
  if (!d.charge_only && ex.SetDevice(a.device).ok()) (void)ex.driver().MemFree(a.base);
  if (live && !d.charge_only && a.kind == AllocKind::kDeviceAsync) {
    // Back in its pool, which may keep it: charged as the pool's until it gives it back.
    ex.resources().pool_retained(a.device) += a.reserved;
    ReconcilePools(ex, a.device);
  } else {
    ex.ReleaseCharge(a.device, a.reserved);
  }
}

void IpcState::PoolDestroyed(Executor& ex, uint64_t handle, uint64_t import_id) {
  if (import_id != 0 && ex.control() != nullptr) ex.control()->Closed(import_id);
  auto it = pool_exports_.find(handle);
  if (it == pool_exports_.end()) return;
  (void)Unexport(ex, it->second.export_id);
  pool_exports_.erase(it);
}

void IpcState::Release(Executor& ex, uint64_t export_id) { ReleaseDeferred(ex, export_id, true); }

void IpcState::ReleaseDeferred(Executor& ex, uint64_t export_id, bool live) {
  auto it = deferred_.find(export_id);
  if (it == deferred_.end()) return;
  if (it->second.charge_only)
    LOG_PEER(PeerLog(), Info, "session {}: the last importer released physical memory of {}: uncharged",
             ex.config().session_id, FormatSize(it->second.alloc.size));
  else
    LOG_PEER(PeerLog(), Info, "session {}: the last importer closed 0x{:x}: freed", ex.config().session_id,
             it->second.alloc.base);
  FreeNow(ex, it->second, live);
  deferred_.erase(it);
}

void IpcState::Teardown(Executor& ex) {
  for (auto& [ptr, imp] : imports_) {
    if (ex.SetDevice(imp.gpu).ok()) (void)(imp.pool_pointer ? ex.driver().MemFree(ptr) : ex.driver().IpcCloseMemory(ptr));
    (void)ex.session().allocations().Erase(ptr);
    if (ex.control() != nullptr) ex.control()->Closed(imp.export_id);
  }
  imports_.clear();
  std::vector<uint64_t> bases;
  for (auto& [base, e] : memory_exports_) bases.push_back(base);
  for (uint64_t base : bases) {
    auto a = ex.session().allocations().Find(base);
    if (!a || a->base != base) continue;
    Allocation kept = *a;
    (void)ex.session().allocations().Erase(base);
    // Nobody has it open: freed with the rest of the session.
    if (!DeferFree(ex, kept)) (void)ex.session().allocations().Insert(kept);
  }
  memory_exports_.clear();
  event_exports_.clear();
  // Physical memory: imports are let go (the driver's handles go with the session's objects,
  // uncharged); exports still imported elsewhere keep their charge here, not in the table.
  ex.session().physical().ForEach([&](uint64_t id, PhysicalMemory& p) {
    if (p.import_id != 0) {
      if (ex.control() != nullptr) ex.control()->Closed(p.import_id);
      p.import_id = 0;
    } else if (p.charged > 0 && DeferPhysicalCharge(ex, id, p.gpu, p.charged)) {
      p.charged = 0;
    }
  });
  physical_exports_.clear();
  // Pools: imports closed (the driver's pools go with the session's objects), exports revoked.
  ex.session().pools().ForEach([&](uint64_t, Executor::Pool& p) {
    if (p.import_id != 0 && ex.control() != nullptr) ex.control()->Closed(p.import_id);
    p.import_id = 0;
  });
  for (auto& [handle, e] : pool_exports_) (void)Unexport(ex, e.export_id);
  pool_exports_.clear();
}

void IpcState::Linger(Executor& ex) {
  if (deferred_.empty()) return;
  LOG_INFO("session {}: ended with {} exported allocation(s) open in other sessions: kept until they close them",
           ex.config().session_id, deferred_.size());
  while (!deferred_.empty()) {
    std::optional<uint64_t> id = ex.control() ? ex.control()->WaitRelease() : std::nullopt;
    if (!id) break;  // the supervisor is gone: nobody will ever close them
    ReleaseDeferred(ex, *id, false);
  }
  for (auto& [id, d] : deferred_) FreeNow(ex, d, false);
  deferred_.clear();
}

}  // namespace remora::worker
