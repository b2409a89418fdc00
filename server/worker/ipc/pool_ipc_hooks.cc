#include "worker/ipc/pool_ipc_hooks.h"

#include <algorithm>
#include <cstring>

#include "remora/base/log.h"
#include "worker/calls/generated_call.h"
#include "worker/ipc/ipc_state.h"
#include "worker/ipc/ipc_hooks.h"
#include "worker/session/peer_log.h"

namespace remora::worker {
namespace {

IpcHandleBytes BytesOf(const CUipcMemHandle& h) {
  IpcHandleBytes b;
  std::memcpy(b.data(), &h, sizeof(h));
  return b;
}

// The export of session pool `handle`, registering it first if needed.
Result<IpcState::Export> ExportOf(Executor& ex, uint64_t handle) {
  auto& exports = ex.ipc().pool_exports();
  if (auto it = exports.find(handle); it != exports.end()) return it->second;
  ASSIGN_OR_RETURN(Executor::Pool * p, ex.session().pools().Get(handle));
  if (p->import_id != 0 || !p->created)
    return Status(Domain::kCuda, CUDA_ERROR_INVALID_VALUE, "only a pool created by this process can be exported");
  RETURN_IF_ERROR(ex.SetDevice(p->gpu));
  ASSIGN_OR_RETURN(IpcShare share, ex.driver().MemPoolExport(p->pool));
  ASSIGN_OR_RETURN(IpcState::Export e, RegisterExport(ex, kIpcKindPool, p->gpu, 0, handle, {}, share.fd.get()));
  exports[handle] = e;
  return e;
}

}  // namespace

CUresult PoolExport(OpContext& x, CUipcMemHandle* capability, unsigned long long pool) {
  auto e = ExportOf(x.executor(), pool);
  if (!e.ok()) return IpcResult(e.status());
  std::memcpy(capability, e->handle.data(), kIpcHandleBytes);
  return CUDA_SUCCESS;
}

CUresult PoolImport(OpContext& x, unsigned long long* pool, CUipcMemHandle capability) {
  Executor& ex = x.executor();
  uint64_t created = 0;
  ex.session().pools().ForEach([&](uint64_t, Executor::Pool& p) { created += p.created; });
  if (!ex.resources().Room(Resource::kPools, created).ok()) return CUDA_ERROR_OUT_OF_MEMORY;
  auto a = OpenExport(ex, kIpcKindPool, BytesOf(capability));
  if (!a.ok()) return IpcResult(a.status());
  IpcShare share;
  share.fd = std::move(a->fd);
  Status st = ex.SetDevice(a->gpu);
  auto p = st.ok() ? ex.driver().MemPoolImport(share) : Result<DPool>(st);
  if (!p.ok()) {
    ex.control()->Closed(a->export_id);
    return IpcResult(p.status());
  }
  *pool = ex.session().pools().Insert({*p, a->gpu, true, a->export_id});
  return CUDA_SUCCESS;
}

CUresult PoolExportPointer(OpContext& x, CUipcMemHandle* capability, CUdeviceptr ptr) {
  Executor& ex = x.executor();
  auto a = ex.session().allocations().Find(ptr);
  // An allocation of a pool this session created (MallocAsync keeps the pool's handle in
  // the cookie; 0 is the device's own pool, which is never shareable).
  if (!a || a->base != ptr || a->kind != AllocKind::kDeviceAsync || a->cookie == 0) return CUDA_ERROR_INVALID_VALUE;
  auto& exports = ex.ipc().memory_exports();
  if (auto it = exports.find(a->base); it != exports.end()) {
    std::memcpy(capability, it->second.handle.data(), kIpcHandleBytes);
    return CUDA_SUCCESS;
  }
  auto pool = ExportOf(ex, a->cookie);
  if (!pool.ok()) return IpcResult(pool.status());
  if (Status st = ex.SetDevice(a->device); !st.ok()) return IpcResult(st);
  auto share = ex.driver().MemPoolExportPointer(a->base, a->size);
  if (!share.ok()) return IpcResult(share.status());
  // What the importer's worker needs: the pool's export id (it opens the pointer only into
  // an import of that pool), then the driver's export data.
  std::vector<uint8_t> real(8);
  for (int i = 0; i < 8; i++) real[static_cast<size_t>(i)] = static_cast<uint8_t>(pool->export_id >> (8 * i));
  real.insert(real.end(), share->handle.begin(), share->handle.end());
  auto e = RegisterExport(ex, kIpcKindPoolPointer, a->device, a->size, a->base, std::move(real), share->fd.get());
  if (!e.ok()) return IpcResult(e.status());
  exports[a->base] = *e;
  std::memcpy(capability, e->handle.data(), kIpcHandleBytes);
  return CUDA_SUCCESS;
}

CUresult PoolImportPointer(OpContext& x, CUdeviceptr* ptr, size_t* size, unsigned long long pool,
                           CUipcMemHandle capability) {
  Executor& ex = x.executor();
  auto p = ex.session().pools().Get(pool);
  if (!p.ok() || (*p)->import_id == 0) return CUDA_ERROR_INVALID_VALUE;  // only into an imported pool
  IpcHandleBytes bytes = BytesOf(capability);
  if (ReopenImport(ex, bytes, ptr, size)) return CUDA_SUCCESS;  // imported again: the same pointer
  auto a = OpenExport(ex, kIpcKindPoolPointer, BytesOf(capability));
  if (!a.ok()) return IpcResult(a.status());
  auto closed = [&] { ex.control()->Closed(a->export_id); };
  uint64_t parent = 0;
  for (size_t i = 0; i < 8 && i < a->real.size(); i++) parent |= uint64_t{a->real[i]} << (8 * i);
  if (a->real.size() < 8 || parent != (*p)->import_id) {
    closed();
    LOG_PEER(PeerLog(), Info,
             "pool pointer import refused: the allocation is not of the pool it was to be imported into");
    return CUDA_ERROR_INVALID_VALUE;
  }
  IpcShare share;
  share.handle.assign(a->real.begin() + 8, a->real.end());
  share.fd = std::move(a->fd);
  Status st = ex.SetDevice(a->gpu);
  auto opened = st.ok() ? ex.driver().MemPoolImportPointer((*p)->pool, share, a->size) : Result<DevPtr>(st);
  if (!opened.ok()) {
    closed();
    return IpcResult(opened.status());
  }
  if (!AdoptImport(ex, *opened, *a, bytes, true)) {
    (void)ex.driver().MemFree(*opened);
    closed();
    return CUDA_ERROR_INVALID_VALUE;
  }
  *ptr = *opened;
  *size = a->size;
  return CUDA_SUCCESS;
}

bool ClosePoolPointer(Executor& ex, uint64_t ptr) {
  auto& imports = ex.ipc().imports();
  auto it = imports.find(ptr);
  if (it == imports.end() || !it->second.pool_pointer) return false;
  if (--it->second.refs > 0) return true;
  IpcState::Import imp = it->second;
  imports.erase(it);
  if (ex.SetDevice(imp.gpu).ok()) (void)ex.driver().MemFree(ptr);
  (void)ex.session().allocations().Erase(ptr);
  if (ex.control() != nullptr) ex.control()->Closed(imp.export_id);
  return true;
}

}  // namespace remora::worker
