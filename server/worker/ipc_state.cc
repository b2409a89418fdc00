#include "worker/ipc_state.h"

#include <vector>

#include "remora/base/log.h"
#include "remora/base/util.h"
#include "worker/executor.h"

namespace remora::worker {

bool IpcState::DeferFree(Executor& ex, const Allocation& a) {
  auto it = memory_exports_.find(a.base);
  if (it == memory_exports_.end()) return false;
  uint64_t id = it->second.export_id;
  memory_exports_.erase(it);
  if (ex.control() == nullptr) return false;
  IpcQuestion q;
  q.op = IpcQuestion::Op::kUnexport;
  q.id = id;
  auto answer = ex.control()->Ask(q, -1);
  if (!answer.ok() || answer->status != 0 || answer->importers == 0) return false;
  LOG_INFO("session {}: 0x{:x} ({}) freed while open in {} other session(s): kept, and charged, until they close it",
           ex.config().session_id, a.base, FormatSize(a.size), answer->importers);
  deferred_[id] = a;
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

void IpcState::FreeNow(Executor& ex, const Allocation& a) {
  if (ex.SetDevice(a.device).ok()) (void)ex.driver().MemFree(a.base);
  ex.ReleaseCharge(a.device, a.reserved);
}

void IpcState::Release(Executor& ex, uint64_t export_id) {
  auto it = deferred_.find(export_id);
  if (it == deferred_.end()) return;
  LOG_INFO("session {}: the last importer closed 0x{:x}: freed", ex.config().session_id, it->second.base);
  FreeNow(ex, it->second);
  deferred_.erase(it);
}

void IpcState::Teardown(Executor& ex) {
  for (auto& [ptr, imp] : imports_) {
    if (ex.SetDevice(imp.gpu).ok()) (void)ex.driver().IpcCloseMemory(ptr);
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
}

void IpcState::Linger(Executor& ex) {
  if (deferred_.empty()) return;
  LOG_INFO("session {}: ended with {} exported allocation(s) open in other sessions: kept until they close them",
           ex.config().session_id, deferred_.size());
  while (!deferred_.empty()) {
    std::optional<uint64_t> id = ex.control() ? ex.control()->WaitRelease() : std::nullopt;
    if (!id) break;  // the supervisor is gone: nobody will ever close them
    Release(ex, *id);
  }
  for (auto& [id, a] : deferred_) FreeNow(ex, a);
  deferred_.clear();
}

}  // namespace remora::worker
