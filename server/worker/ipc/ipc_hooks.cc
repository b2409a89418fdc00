#include "worker/ipc/ipc_hooks.h"

#include <algorithm>
#include <cstring>

#include "remora/base/log.h"
#include "remora/base/util.h"
#include "worker/calls/generated_call.h"
#include "worker/ipc/ipc_state.h"
#include "worker/session/peer_log.h"

namespace remora::worker {
namespace {

constexpr uint8_t kMemory = 0, kEvent = 1;

ControlSource* Link(OpContext& x) {
  ControlSource* link = x.executor().control();
  if (link == nullptr)
    LOG_PEER(PeerLog(), Info, "CUDA IPC refused: this worker has no supervisor to register exports with");
  return link;
}

template <typename H>
IpcHandleBytes BytesOf(const H& h) {
  static_assert(sizeof(H) == kIpcHandleBytes);
  IpcHandleBytes b;
  std::memcpy(b.data(), &h, sizeof(h));
  return b;
}

// Room for one more export (ipc-exports; the supervisor checks it again, with the tenant's
// and the server's bounds): CUDA_ERROR_OUT_OF_MEMORY, as the driver when it cannot make one.
CUresult ExportRoom(Executor& ex) {
  bool room = ex.resources().Room(Resource::kIpcExports, ex.ipc().ExportCount()).ok();
  return room ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

}  // namespace

CUresult IpcResult(const Status& st) {
  if (st.ok()) return CUDA_SUCCESS;
  if (st.domain() == Domain::kCuda || st.domain() == Domain::kCudart) return static_cast<CUresult>(st.raw());
  if (st.code() == Err::kInvalidValue) return CUDA_ERROR_INVALID_VALUE;
  if (st.code() == Err::kInvalidResourceHandle) return CUDA_ERROR_INVALID_HANDLE;
  return CUDA_ERROR_UNKNOWN;
}

Result<IpcAnswer> OpenExport(Executor& ex, uint8_t kind, const IpcHandleBytes& handle) {
  ControlSource* link = ex.control();
  if (link == nullptr) return Status(Domain::kCuda, CUDA_ERROR_NOT_SUPPORTED, "no supervisor");
  IpcQuestion q;
  q.op = IpcQuestion::Op::kOpen;
  q.kind = kind;
  q.bytes.assign(handle.begin(), handle.end());
  ASSIGN_OR_RETURN(IpcAnswer a, link->Ask(q, -1));
  if (a.status != CUDA_SUCCESS) return Status(Domain::kCuda, a.status, "the IPC handle was refused");
  // The exporter's GPU must be one of this session's (a handle works on its own GPU only).
  const auto& gpus = ex.config().gpus;
  if (std::find(gpus.begin(), gpus.end(), a.gpu) == gpus.end()) {
    link->Closed(a.export_id);
    LOG_PEER(PeerLog(), Info, "IPC open refused: the export is on server GPU {}, not attached to this session", a.gpu);
    return Status(Domain::kCuda, CUDA_ERROR_INVALID_DEVICE, "the exporter's GPU is not this session's");
  }
  return a;
}

Result<IpcState::Export> RegisterExport(Executor& ex, uint8_t kind, int gpu, uint64_t size, uint64_t local_id,
                                        std::vector<uint8_t> real, int fd) {
  ControlSource* link = ex.control();
  if (link == nullptr) return Status(Domain::kCuda, CUDA_ERROR_NOT_SUPPORTED, "no supervisor to register exports with");
  if (CUresult room = ExportRoom(ex); room != CUDA_SUCCESS)
    return Status(Domain::kCuda, room,
                  "session limit reached: ipc-exports (remora-server --session-limit ipc-exports=N)");
  IpcQuestion q;
  q.op = IpcQuestion::Op::kExport;
  q.kind = kind;
  q.gpu = gpu;
  q.size = size;
  q.bytes = std::move(real);
  q.id = local_id;
  auto answer = link->Ask(q, fd);
  if (!answer.ok()) {
    LOG_PEER(PeerLog(), Warn, "cannot register an IPC export with the supervisor: {}", answer.status().message());
    return Status(Domain::kCuda, CUDA_ERROR_UNKNOWN, "the supervisor did not answer");
  }
  if (answer->status != CUDA_SUCCESS) return Status(Domain::kCuda, answer->status, "export refused");
  return IpcState::Export{answer->export_id, answer->handle};
}

CUresult IpcGetMem(OpContext& x, CUipcMemHandle* handle, CUdeviceptr dptr) {
  Executor& ex = x.executor();
  auto a = ex.session().allocations().Find(dptr);
  // CUDA exports cudaMalloc'd memory (not pools', not another process's).
  if (!a || a->kind != AllocKind::kDevice) return CUDA_ERROR_INVALID_VALUE;
  auto& exports = ex.ipc().memory_exports();
  if (auto it = exports.find(a->base); it != exports.end()) {
    std::memcpy(handle, it->second.handle.data(), kIpcHandleBytes);
    return CUDA_SUCCESS;
  }
  ControlSource* link = Link(x);
  if (link == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  if (CUresult room = ExportRoom(ex); room != CUDA_SUCCESS) return room;
  if (Status st = ex.SetDevice(a->device); !st.ok()) return IpcResult(st);
  auto share = ex.driver().IpcExportMemory(a->base, a->size);
  if (!share.ok()) return IpcResult(share.status());
  IpcQuestion q;
  q.op = IpcQuestion::Op::kExport;
  q.kind = kMemory;
  q.gpu = a->device;
  q.size = a->size;
  q.bytes = share->handle;
  q.id = a->base;
  auto answer = link->Ask(q, share->fd.get());
  if (!answer.ok()) {
    LOG_PEER(PeerLog(), Warn, "cannot register an IPC export with the supervisor: {}", answer.status().message());
    return CUDA_ERROR_UNKNOWN;
  }
  if (answer->status != CUDA_SUCCESS) return static_cast<CUresult>(answer->status);
  exports[a->base] = IpcState::Export{answer->export_id, answer->handle};
  std::memcpy(handle, answer->handle.data(), kIpcHandleBytes);
  return CUDA_SUCCESS;
}

bool ReopenImport(Executor& ex, const IpcHandleBytes& handle, CUdeviceptr* ptr, size_t* size) {
  for (auto& [at, imp] : ex.ipc().imports()) {
    if (imp.handle != handle) continue;
    imp.refs++;
    *ptr = at;
    *size = imp.size;
    return true;
  }
  return false;
}

bool AdoptImport(Executor& ex, uint64_t base, const IpcAnswer& a, const IpcHandleBytes& handle, bool pool_pointer) {
  Allocation alloc;
  alloc.base = base;
  alloc.size = a.size;
  alloc.device = a.gpu;
  alloc.kind = AllocKind::kIpcImported;
  alloc.reserved = 0;  // charged to its exporter only
  if (!ex.session().allocations().Insert(alloc).ok()) return false;
  IpcState::Import imp;
  imp.export_id = a.export_id;
  imp.size = a.size;
  imp.gpu = a.gpu;
  imp.handle = handle;
  imp.pool_pointer = pool_pointer;
  ex.ipc().imports()[base] = imp;
  return true;
}

CUresult IpcOpenMem(OpContext& x, CUdeviceptr* dptr, size_t* size, CUipcMemHandle handle, unsigned int flags) {
  if (flags & ~unsigned{CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS}) return CUDA_ERROR_INVALID_VALUE;
  Executor& ex = x.executor();
  IpcHandleBytes bytes = BytesOf(handle);
  // The same handle opened again by this session: the same mapping, counted.
  if (ReopenImport(ex, bytes, dptr, size)) return CUDA_SUCCESS;
  auto a = OpenExport(x.executor(), kMemory, bytes);
  if (!a.ok()) return IpcResult(a.status());
  auto closed = [&] { x.executor().control()->Closed(a->export_id); };
  if (Status st = ex.SetDevice(a->gpu); !st.ok()) {
    closed();
    return IpcResult(st);
  }
  IpcShare share;
  share.handle = a->real;
  share.fd = std::move(a->fd);
  auto p = ex.driver().IpcOpenMemory(share, a->size);
  if (!p.ok()) {
    closed();
    return IpcResult(p.status());
  }
  if (!AdoptImport(ex, *p, *a, bytes, false)) {
    (void)ex.driver().IpcCloseMemory(*p);
    closed();
    return CUDA_ERROR_INVALID_VALUE;
  }
  *dptr = *p;
  *size = a->size;
  return CUDA_SUCCESS;
}

CUresult IpcCloseMem(OpContext& x, CUdeviceptr dptr) {
  Executor& ex = x.executor();
  auto& imports = ex.ipc().imports();
  auto it = imports.find(dptr);
  if (it == imports.end()) return CUDA_ERROR_INVALID_VALUE;
  if (--it->second.refs > 0) return CUDA_SUCCESS;
  IpcState::Import imp = it->second;
  imports.erase(it);
  Status st = ex.SetDevice(imp.gpu);
  if (st.ok()) st = ex.driver().IpcCloseMemory(dptr);
  (void)ex.session().allocations().Erase(dptr);
  if (ex.control() != nullptr) ex.control()->Closed(imp.export_id);
  return IpcResult(st);
}

CUresult IpcGetEvent(OpContext& x, CUipcEventHandle* handle, CUevent event) {
  Executor& ex = x.executor();
  auto& exports = ex.ipc().event_exports();
  if (auto it = exports.find(event); it != exports.end()) {
    std::memcpy(handle, it->second.handle.data(), kIpcHandleBytes);
    return CUDA_SUCCESS;
  }
  const Event* found = nullptr;
  ex.session().events().ForEach([&](uint64_t, Event& e) {
    if (e.event == event) found = &e;
  });
  // As CUDA: only an event created with cudaEventInterprocess | cudaEventDisableTiming.
  constexpr unsigned kNeeded = CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING;
  if (found == nullptr || (found->flags & kNeeded) != kNeeded) return CUDA_ERROR_INVALID_HANDLE;
  ControlSource* link = Link(x);
  if (link == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  if (CUresult room = ExportRoom(ex); room != CUDA_SUCCESS) return room;
  int gpu = found->gpu;
  if (Status st = ex.SetDevice(gpu); !st.ok()) return IpcResult(st);
  auto share = ex.driver().IpcExportEvent(event);
  if (!share.ok()) return IpcResult(share.status());
  IpcQuestion q;
  q.op = IpcQuestion::Op::kExport;
  q.kind = kEvent;
  q.gpu = gpu;
  q.bytes = share->handle;
  q.id = reinterpret_cast<uint64_t>(event);
  auto answer = link->Ask(q, share->fd.get());
  if (!answer.ok()) {
    LOG_PEER(PeerLog(), Warn, "cannot register an IPC export with the supervisor: {}", answer.status().message());
    return CUDA_ERROR_UNKNOWN;
  }
  if (answer->status != CUDA_SUCCESS) return static_cast<CUresult>(answer->status);
  exports[event] = IpcState::Export{answer->export_id, answer->handle};
  std::memcpy(handle, answer->handle.data(), kIpcHandleBytes);
  return CUDA_SUCCESS;
}

CUresult IpcOpenEvent(OpContext& x, CUevent* event, CUipcEventHandle handle) {
  Executor& ex = x.executor();
  if (Status room = x.HandleRoom(HandleKind::kEvent); !room.ok()) return CUDA_ERROR_OUT_OF_MEMORY;
  auto a = OpenExport(x.executor(), kEvent, BytesOf(handle));
  if (!a.ok()) return IpcResult(a.status());
  if (Status st = ex.SetDevice(a->gpu); !st.ok()) return IpcResult(st);
  IpcShare share;
  share.handle = a->real;
  share.fd = std::move(a->fd);
  auto e = ex.driver().IpcOpenEvent(share);
  if (!e.ok()) return IpcResult(e.status());
  // Registered here with its flags; the generated code finds it and answers its handle.
  ex.session().events().Insert(Event{*e, a->gpu, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING});
  *event = static_cast<CUevent>(*e);
  return CUDA_SUCCESS;
}

}  // namespace remora::worker
