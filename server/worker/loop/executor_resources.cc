// The executor's own resources (executor.h): pooled events, staging buffers of captured
// copies, and the release of everything a session holds when it ends. Executor thread only.
#include "remora/base/log.h"
#include "worker/calls/generated_call.h"
#include "worker/loop/compute_hook.h"
#include "worker/session/executor.h"
#include "worker/ipc/ipc_state.h"
#include "worker/session/peer_log.h"

namespace remora::worker {

Status Executor::Charge(int gpu, uint64_t bytes) {
  if (config_.ledger == nullptr) return Status::Ok();
  uint64_t short_by = 0;
  Status st = config_.ledger->Reserve(config_.ledger_slot, static_cast<uint32_t>(gpu), bytes, &short_by);
  if (st.ok() || short_by == 0 || control_ == nullptr) return st;
  IpcQuestion q;
  q.op = IpcQuestion::Op::kBorrow;
  q.gpu = gpu;
  q.size = short_by;
  auto answer = control_->Ask(q, -1);
  if (!answer.ok() || answer->status != 0) {
    LOG_DEBUG("no more of the pool-wide limit for this server: {}", answer.ok() ? "refused" : answer.status().message());
    return st;
  }
  return config_.ledger->Reserve(config_.ledger_slot, static_cast<uint32_t>(gpu), bytes);
}

Result<DEvent> Executor::AcquirePoolEvent(int gpu) {
  RETURN_IF_ERROR(SetDevice(gpu));
  return event_pool_.Acquire(driver_, gpu);
}

Result<DEvent> Executor::RecordPoolEvent(const Stream& s) {
  ASSIGN_OR_RETURN(DEvent e, AcquirePoolEvent(s.gpu));
  Status st = driver_.EventRecord(e, s.stream);
  if (!st.ok()) {
    event_pool_.Release(s.gpu, e);
    return st;
  }
  if (compute_) compute_->Covered(s, e);
  return e;
}

void Executor::ReleasePoolEvent(int gpu, DEvent e) {
  if (compute_) compute_->Released(gpu, e);
  event_pool_.Release(gpu, e);
}

Result<DevPtr> Executor::AllocateStaging(int gpu, uint64_t bytes) {
  RETURN_IF_ERROR(SetDevice(gpu));
  RETURN_IF_ERROR(Charge(gpu, bytes));
  // Remora's own allocation, also in the middle of a capture the application's thread may
  // not allocate in: the worker thread is relaxed for it.
  GraphTables& g = session_.graphs();
  bool relax = g.active_captures() > 0 && g.worker_mode != CU_STREAM_CAPTURE_MODE_RELAXED;
  if (relax) (void)driver_.SetCaptureMode(CU_STREAM_CAPTURE_MODE_RELAXED);
  auto p = driver_.MemAlloc(bytes);
  if (relax) (void)driver_.SetCaptureMode(g.worker_mode);
  if (!p.ok()) {
    ReleaseCharge(gpu, bytes);
    return p.status();
  }
  Allocation a;
  a.base = *p;
  a.size = bytes;
  a.device = gpu;
  a.kind = AllocKind::kGraphStaging;
  a.reserved = bytes;
  if (Status st = session_.allocations().Insert(a); !st.ok()) {
    (void)driver_.MemFree(*p);
    ReleaseCharge(gpu, bytes);
    return st;
  }
  return *p;
}

void Executor::FreeStaging(const std::vector<DevPtr>& buffers) {
  for (DevPtr p : buffers) {
    auto found = session_.allocations().Find(p);
    if (!found || found->base != p || (found->kind != AllocKind::kGraphStaging && found->kind != AllocKind::kGraphMemory))
      continue;
    auto a = session_.allocations().Erase(p);
    // A graph memory node's memory is the driver's (freed with the graph); staging is ours.
    if (a->kind == AllocKind::kGraphStaging && SetDevice(a->device).ok()) (void)driver_.MemFree(p);
    ReleaseCharge(a->device, a->reserved);
  }
}

void Executor::ReleaseEverything() {
  struct Releaser final : SessionState::Releaser {
    explicit Releaser(Executor& ex) : ex(ex) {}
    Status SetDevice(int gpu) override { return ex.SetDevice(gpu); }
    void ReleaseCharge(int gpu, uint64_t bytes) override { ex.ReleaseCharge(gpu, bytes); }
    void DestroyLibraryObject(LibObject& o) override {
      const LibraryBinding* lib = ex.library(static_cast<uint16_t>(o.library));
      if (lib == nullptr || lib->table->destroy == nullptr || o.bits == 0) return;
      Status st = lib->table->destroy(lib->api, o.kind, o.bits);
      if (!st.ok())
        LOG_PEER(PeerLog(), Warn, "session {}: ending a {}: {}", ex.config_.session_id, HandleKindName(o.kind),
                 st.ToString());
    }
    Executor& ex;
  } releaser(*this);
  // Newest first: the compute scheduler's turns and markers, operations in flight, the
  // session's objects, then what the loop itself created (pooled events and buffers, the
  // transport's pinned regions). Host functions the client will never run are let go first:
  // abandoning a transfer waits for its stream, which such a function would block forever.
  if (nccl_) NcclTeardown(nccl_.get());  // aborted first: work blocked in a collective ends
  session_.ReleaseHostCallbacks();
  driver_.AbandonStreamWaits();  // waits for values that will never come: before memory goes
  if (compute_) compute_->Close();
  for (auto& op : pending_) op->Abandon(*this);
  pending_.clear();
  ipc_->Teardown(*this);  // opens closed; exported memory still open elsewhere set aside
  session_.ReleaseAll(driver_, releaser);
  ipc_->Linger(*this);    // that memory lives (charged) until its importers close it
  // What the session's pools kept from its frees, and its context limits' memory, go with them.
  for (auto& [gpu, bytes] : resources_.TakeMemoryCharges())
    if (bytes > 0) ReleaseCharge(gpu, bytes);
  event_pool_.ReleaseAll(driver_, [&](int gpu) { return SetDevice(gpu); });
  for (void* p : deferred_host_frees_) driver_.HostFree(p);  // the host functions were let go
  deferred_host_frees_.clear();
  bounce_pool_.ReleaseAll(driver_);
  for (const SharedRegion& r : registered_) driver_.HostUnregister(r.base);
  registered_.clear();
}

}  // namespace remora::worker
