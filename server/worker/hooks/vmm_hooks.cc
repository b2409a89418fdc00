#include "worker/hooks/vmm_hooks.h"

#include <algorithm>
#include <cstring>

#include "cuda_api.h"
#include "remora/base/log.h"
#include "worker/calls/generated_call.h"
#include "worker/ipc/ipc_state.h"
#include "worker/ipc/ipc_hooks.h"
#include "worker/session/peer_log.h"

namespace remora::worker {
namespace {

gen::cuda::Api& Api(OpContext& x) { return x.Library<gen::cuda::Api>(); }
SessionState& State(OpContext& x) { return x.executor().session(); }

// The reservation containing [ptr, ptr + size), if any.
Reservation* ReservationOf(OpContext& x, uint64_t ptr, uint64_t size, uint64_t* base) {
  auto& rs = State(x).reservations();
  auto it = rs.upper_bound(ptr);
  if (it == rs.begin()) return nullptr;
  --it;
  if (ptr - it->first > it->second.size || size > it->second.size - (ptr - it->first)) return nullptr;
  *base = it->first;
  return &it->second;
}

// Forgets physical memory the session no longer holds (released and unmapped): its charge
// is released, unless it was exported and is still imported elsewhere (then it is released
// when the last importer lets go); an import is closed with the supervisor.
void Collect(OpContext& x, uint64_t id) {
  PhysicalMemory* p = State(x).physical().Find(id);
  if (p == nullptr || p->refs > 0 || p->maps > 0) return;
  Executor& ex = x.executor();
  if (p->import_id != 0) {
    if (ex.control() != nullptr) ex.control()->Closed(p->import_id);
  } else if (!ex.ipc().DeferPhysicalCharge(ex, id, p->gpu, p->charged)) {
    ex.ReleaseCharge(p->gpu, p->charged);
  }
  State(x).physical().Erase(id);
}

// The application's ordinal of a server GPU (for what the driver reports back).
int OrdinalOf(OpContext& x, int gpu) {
  const auto& gpus = x.executor().config().gpus;
  for (size_t i = 0; i < gpus.size(); i++)
    if (gpus[i] == gpu) return static_cast<int>(i);
  return -1;
}

}  // namespace

CUresult VmmReserve(OpContext& x, CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                    unsigned long long flags) {
  int gpu = x.gpu();
  CUresult r = Api(x).cuMemAddressReserve(ptr, size, alignment, addr, flags);
  if (r != CUDA_SUCCESS) return r;
  Allocation a;
  a.base = *ptr;
  a.size = size;
  a.device = gpu;
  a.kind = AllocKind::kVirtual;
  if (!State(x).allocations().Insert(a).ok()) {
    (void)Api(x).cuMemAddressFree(*ptr, size);
    return CUDA_ERROR_INVALID_VALUE;
  }
  State(x).reservations()[*ptr] = Reservation{size, gpu};
  return CUDA_SUCCESS;
}

CUresult VmmFree(OpContext& x, CUdeviceptr ptr, size_t size) {
  auto& rs = State(x).reservations();
  auto it = rs.find(ptr);
  if (it == rs.end() || it->second.size != size) return CUDA_ERROR_INVALID_VALUE;
  for (auto& [p, m] : State(x).mappings())
    if (p >= ptr && p < ptr + size) return CUDA_ERROR_INVALID_VALUE;  // unmap first, as the driver requires
  CUresult r = Api(x).cuMemAddressFree(ptr, size);
  if (r != CUDA_SUCCESS) return r;
  (void)State(x).allocations().Erase(ptr);
  rs.erase(it);
  return CUDA_SUCCESS;
}

CUresult VmmCreate(OpContext& x, CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                   unsigned long long flags) {
  if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int gpu = x.gpu();
  // Charged before the driver call, like every allocation: the ledger stays exact.
  Status q = x.executor().Charge(gpu, size);
  if (!q.ok()) {
    LOG_PEER(PeerLog(), Info, "cuMemCreate of {} bytes refused: {}", size, q.message());
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  CUmemGenericAllocationHandle real = 0;
  CUresult r = Api(x).cuMemCreate(&real, size, prop, flags);
  if (r != CUDA_SUCCESS) {
    x.executor().ReleaseCharge(gpu, size);
    return r;
  }
  *handle = State(x).physical().Insert(PhysicalMemory{real, gpu, size, 1, 0, size, 0});
  return CUDA_SUCCESS;
}

CUresult VmmExport(OpContext& x, CUipcMemHandle* capability, CUmemGenericAllocationHandle handle) {
  Executor& ex = x.executor();
  PhysicalMemory* p = State(x).physical().Find(handle);
  if (p == nullptr || p->refs == 0) return CUDA_ERROR_INVALID_VALUE;
  // Memory this session imported is another session's to share.
  if (p->import_id != 0) return CUDA_ERROR_INVALID_VALUE;
  auto& exports = ex.ipc().physical_exports();
  if (auto it = exports.find(handle); it != exports.end()) {
    std::memcpy(capability, it->second.handle.data(), kIpcHandleBytes);
    return CUDA_SUCCESS;
  }
  if (Status st = ex.SetDevice(p->gpu); !st.ok()) return CUDA_ERROR_INVALID_DEVICE;
  // The driver's descriptor (it fails unless cuMemCreate asked for POSIX descriptors); it
  // goes to the supervisor, never to the client, whose handle is the capability.
  int fd = -1;
  CUresult r = Api(x).cuMemExportToShareableHandle(&fd, p->real, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  if (r != CUDA_SUCCESS) return r;
  Fd owned(fd);
  auto e = RegisterExport(ex, kIpcKindPhysical, p->gpu, p->size, handle, {}, owned.get());
  if (!e.ok()) return IpcResult(e.status());
  exports[handle] = *e;
  std::memcpy(capability, e->handle.data(), kIpcHandleBytes);
  return CUDA_SUCCESS;
}

CUresult VmmImport(OpContext& x, CUmemGenericAllocationHandle* handle, CUipcMemHandle capability) {
  Executor& ex = x.executor();
  if (Status room = x.HandleRoom(HandleKind::kPhysical); !room.ok()) return CUDA_ERROR_OUT_OF_MEMORY;
  IpcHandleBytes bytes;
  std::memcpy(bytes.data(), &capability, sizeof(capability));
  auto a = OpenExport(ex, kIpcKindPhysical, bytes);
  if (!a.ok()) return IpcResult(a.status());
  if (!a->fd) {
    ex.control()->Closed(a->export_id);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  CUmemGenericAllocationHandle real = 0;
  CUresult r = ex.SetDevice(a->gpu).ok()
                   ? Api(x).cuMemImportFromShareableHandle(&real, reinterpret_cast<void*>(static_cast<intptr_t>(a->fd.get())),
                                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
                   : CUDA_ERROR_INVALID_DEVICE;
  if (r != CUDA_SUCCESS) {
    ex.control()->Closed(a->export_id);
    return r;
  }
  // Charged to its exporter only.
  *handle = State(x).physical().Insert(PhysicalMemory{real, a->gpu, a->size, 1, 0, 0, a->export_id});
  return CUDA_SUCCESS;
}

CUresult VmmRelease(OpContext& x, CUmemGenericAllocationHandle handle) {
  PhysicalMemory* p = State(x).physical().Find(handle);
  if (p == nullptr || p->refs == 0) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = Api(x).cuMemRelease(p->real);
  if (r != CUDA_SUCCESS) return r;
  p->refs--;
  Collect(x, handle);
  return CUDA_SUCCESS;
}

CUresult VmmMap(OpContext& x, CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                unsigned long long flags) {
  uint64_t base = 0;
  if (ReservationOf(x, ptr, size, &base) == nullptr) return CUDA_ERROR_INVALID_VALUE;
  PhysicalMemory* p = State(x).physical().Find(handle);
  if (p == nullptr || p->refs == 0 || offset > p->size || size > p->size - offset) return CUDA_ERROR_INVALID_VALUE;
  if (!State(x).allocations().AddMapping(ptr, size).ok()) return CUDA_ERROR_INVALID_VALUE;  // overlaps
  CUresult r = Api(x).cuMemMap(ptr, size, offset, p->real, flags);
  if (r != CUDA_SUCCESS) {
    (void)State(x).allocations().RemoveMapping(ptr, size);
    return r;
  }
  p->maps++;
  State(x).mappings()[ptr] = Mapping{size, handle};
  return CUDA_SUCCESS;
}

CUresult VmmUnmap(OpContext& x, CUdeviceptr ptr, size_t size) {
  auto& ms = State(x).mappings();
  auto it = ms.find(ptr);
  if (it == ms.end() || it->second.size != size) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = Api(x).cuMemUnmap(ptr, size);
  if (r != CUDA_SUCCESS) return r;
  (void)State(x).allocations().RemoveMapping(ptr, size);
  uint64_t id = it->second.physical;
  ms.erase(it);
  if (PhysicalMemory* p = State(x).physical().Find(id)) p->maps--;
  Collect(x, id);
  return CUDA_SUCCESS;
}

CUresult VmmSetAccess(OpContext& x, CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  uint64_t base = 0;
  if (ReservationOf(x, ptr, size, &base) == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Api(x).cuMemSetAccess(ptr, size, desc, count);
}

CUresult VmmGetAccess(OpContext& x, unsigned long long* flags, const CUmemLocation* location, CUdeviceptr ptr) {
  uint64_t base = 0;
  if (ReservationOf(x, ptr, 1, &base) == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return Api(x).cuMemGetAccess(flags, location, ptr);
}

CUresult VmmProperties(OpContext& x, CUmemAllocationProp* prop, CUmemGenericAllocationHandle handle) {
  PhysicalMemory* p = State(x).physical().Find(handle);
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = Api(x).cuMemGetAllocationPropertiesFromHandle(prop, p->real);
  if (r != CUDA_SUCCESS) return r;
  if (prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE) prop->location.id = OrdinalOf(x, prop->location.id);
  return CUDA_SUCCESS;
}

CUresult VmmRetain(OpContext& x, CUmemGenericAllocationHandle* handle, void* addr) {
  auto p = reinterpret_cast<uint64_t>(addr);
  for (auto& [base, m] : State(x).mappings()) {
    if (p < base || p >= base + m.size) continue;
    PhysicalMemory* phys = State(x).physical().Find(m.physical);
    if (phys == nullptr) break;
    CUmemGenericAllocationHandle real = 0;
    CUresult r = Api(x).cuMemRetainAllocationHandle(&real, addr);
    if (r != CUDA_SUCCESS) return r;
    phys->refs++;
    *handle = m.physical;
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

}  // namespace remora::worker
