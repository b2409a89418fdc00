// Unified memory: cudaMallocManaged, __managed__ variables, prefetch, advice and range
// attributes, stream attachment. The coherence of the host copy is managed.h's; what these
// functions add is the allocation (device memory whose address is also mapped here) and the
// answers CUDA gives about managed ranges. Prefetching to a device sends the range's dirty
// data now; advice is recorded and answered back (the device's placement is the server's).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>

#include "export.h"
#include "managed.h"
#include "modules.h"
#include "remora/base/log.h"
#include "remora/base/util.h"
#include "runtime.h"
#include "wire_args.h"

namespace remora::shim {

// Device memory whose address is also mapped in this process (managed.h). The worker's
// allocation is padded so the application's range starts on a chunk: managed ranges never
// share a page. Retries at other addresses if one is taken here.
Result<void*> AllocateManaged(size_t size, const char* call, bool pinned) {
  Runtime& rt = Runtime::Get();
  ASSIGN_OR_RETURN(int device, rt.CurrentDevice());
  ASSIGN_OR_RETURN(Client * c, rt.Session());
  constexpr uint64_t kChunk = ManagedMemory::kChunk;
  uint64_t padded = AlignUp(size, kChunk) + kChunk;
  std::vector<uint64_t> taken;  // allocations whose address this process cannot map
  Status last;
  uint64_t result = 0;
  for (int attempt = 0; attempt < 8 && result == 0; attempt++) {
    uint64_t ptr = 0;
    RETURN_IF_ERROR(c->Call(device, [&](wire::Request::Builder& r) { r.initMemAlloc().setSize(padded); },
                            [&](wire::Reply::Reader& r) -> Status {
                              ptr = r.getPointer();
                              return Status::Ok();
                            }));
    uint64_t base = AlignUp(ptr, kChunk);
    last = pinned ? rt.managed().AddPinned(c, base, size, device, ptr) : rt.managed().Add(c, base, size, device, ptr);
    if (last.ok()) {
      result = base;
      if (!pinned) rt.AddDeviceAllocation(base, size, device, AllocKind::kManaged);  // pinned: when it wakes
    } else {
      taken.push_back(ptr);
      if (last.code() != Err::kMemoryAllocation) break;
    }
  }
  for (uint64_t p : taken)
    (void)c->Call(device, [&](wire::Request::Builder& r) { r.initMemFree().setPtr(p); },
                  [](wire::Reply::Reader&) { return Status::Ok(); });
  if (result == 0) {
    LOG_INFO("{}: {}", call, last.ToString());
    return last.ok() ? Error(Err::kMemoryAllocation, "no address for managed memory") : last;
  }
  return reinterpret_cast<void*>(result);
}

// Frees managed memory (cudaFree of a managed pointer): true if `p` was managed.
bool FreeManaged(Client* c, void* p, Status* st, bool pinned) {
  Runtime& rt = Runtime::Get();
  auto a = rt.FindDevice(U(p));
  bool awake = a && a->kind == AllocKind::kManaged && a->base == U(p);
  // Sleeping pinned memory is in no device table (AddPinned).
  std::optional<int> device = awake ? std::optional<int>(a->device) : pinned ? rt.managed().DeviceOf(U(p)) : std::nullopt;
  if (!device) return false;
  uint64_t device_base = rt.managed().Remove(c, U(p));
  if (awake) (void)rt.RemoveDeviceAllocation(U(p));
  *st = c->Call(*device, [&](wire::Request::Builder& r) { r.initMemFree().setPtr(device_base); },
                [](wire::Reply::Reader&) { return Status::Ok(); });
  return true;
}

Status WakePinned(const void* words, size_t n) {
  Runtime& rt = Runtime::Get();
  if (!rt.managed().any_asleep()) return Status::Ok();
  for (const ManagedMemory::Woken& w : rt.managed().Wake(words, n)) {
    // Its bytes go to the device at the next flush: device-to-host copies still landing in
    // it land first.
    ASSIGN_OR_RETURN(Client * c, rt.SessionFor(w.device));
    c->AwaitLandingsInto(reinterpret_cast<const void*>(w.base), w.size);
    rt.AddDeviceAllocation(w.base, w.size, w.device, AllocKind::kManaged);
  }
  return Status::Ok();
}

// The __managed__ variables of a fat binary: their device addresses on the current device,
// mapped here, and the program's pointers to them set (__cudaInitModule).
Status InitManagedVariables(FatbinRecord* fb) {
  std::vector<VariableRecord*> vars = Registry::Get().ManagedVariables(fb);
  if (vars.empty()) return Status::Ok();
  Runtime& rt = Runtime::Get();
  ASSIGN_OR_RETURN(int device, rt.CurrentDevice());
  ASSIGN_OR_RETURN(Client * c, rt.Session());
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  std::vector<std::pair<VariableRecord*, uint64_t>> set;
  for (VariableRecord* v : vars) {
    ASSIGN_OR_RETURN(auto g, GlobalOn(v, device));
    if (!rt.managed().Contains(g.first)) ranges.emplace_back(g.first, g.second);
    set.emplace_back(v, g.first);
  }
  RETURN_IF_ERROR(rt.managed().AddVariables(c, ranges, device));
  for (auto [v, addr] : set) *static_cast<void**>(const_cast<void*>(v->host_var)) = reinterpret_cast<void*>(addr);
  return Status::Ok();
}

namespace {

cudaError_t Done(const Status& st, const char* call) { return Finish(st, call); }

Status CheckManaged(const void* p, size_t n) {
  if (p == nullptr) return Error(Err::kInvalidValue, "devPtr is NULL");
  return Runtime::Get().managed().AdviceFor(U(p), n == 0 ? 1 : n).status();
}

Status Prefetch(const void* p, size_t n, cudaMemLocation loc, cudaStream_t stream) {
  Runtime& rt = Runtime::Get();
  ASSIGN_OR_RETURN(Client * c, rt.Session());
  (void)c;
  int device = 0;
  RETURN_IF_ERROR(rt.CheckStream(stream, &device));
  ASSIGN_OR_RETURN(ManagedMemory::Advice * a, rt.managed().AdviceFor(U(p), n == 0 ? 1 : n));
  if (loc.type == cudaMemLocationTypeDevice) {
    RETURN_IF_ERROR(rt.Device(loc.id).status());
    RETURN_IF_ERROR(rt.managed().Flush(U(p), n));
    a->last_prefetch = loc.id;
  } else if (loc.type == cudaMemLocationTypeHost || loc.type == cudaMemLocationTypeHostNuma ||
             loc.type == cudaMemLocationTypeHostNumaCurrent) {
    a->last_prefetch = cudaCpuDeviceId;  // fetched on the host's first touch
  } else {
    return Error(Err::kInvalidValue, "cannot prefetch to a location of type {}", static_cast<int>(loc.type));
  }
  return Status::Ok();
}

Status Advise(const void* p, size_t n, cudaMemoryAdvise advice, cudaMemLocation loc) {
  Runtime& rt = Runtime::Get();
  ASSIGN_OR_RETURN(ManagedMemory::Advice * a, rt.managed().AdviceFor(U(p), n == 0 ? 1 : n));
  int id = loc.type == cudaMemLocationTypeDevice ? loc.id : cudaCpuDeviceId;
  if (loc.type == cudaMemLocationTypeDevice) RETURN_IF_ERROR(rt.Device(loc.id).status());
  switch (advice) {
    case cudaMemAdviseSetReadMostly: a->read_mostly = 1; return Status::Ok();
    case cudaMemAdviseUnsetReadMostly: a->read_mostly = 0; return Status::Ok();
    case cudaMemAdviseSetPreferredLocation: a->preferred = id; return Status::Ok();
    case cudaMemAdviseUnsetPreferredLocation: a->preferred = cudaInvalidDeviceId; return Status::Ok();
    case cudaMemAdviseSetAccessedBy:
      if (std::find(a->accessed_by.begin(), a->accessed_by.end(), id) == a->accessed_by.end()) a->accessed_by.push_back(id);
      return Status::Ok();
    case cudaMemAdviseUnsetAccessedBy:
      std::erase(a->accessed_by, id);
      return Status::Ok();
    default:
      return Error(Err::kInvalidValue, "unknown advice {}", static_cast<int>(advice));
  }
}

Status RangeAttribute(void* data, size_t size, cudaMemRangeAttribute attr, const void* p, size_t n) {
  if (data == nullptr) return Error(Err::kInvalidValue, "data is NULL");
  ASSIGN_OR_RETURN(ManagedMemory::Advice * a, Runtime::Get().managed().AdviceFor(U(p), n == 0 ? 1 : n));
  auto put = [&](int v) -> Status {
    if (size != sizeof(int)) return Error(Err::kInvalidValue, "this attribute is one int, not {} bytes", size);
    std::memcpy(data, &v, sizeof(v));
    return Status::Ok();
  };
  auto type_of = [](int id) {
    return id == cudaInvalidDeviceId ? cudaMemLocationTypeInvalid : id == cudaCpuDeviceId ? cudaMemLocationTypeHost
                                                                                         : cudaMemLocationTypeDevice;
  };
  switch (attr) {
    case cudaMemRangeAttributeReadMostly: return put(a->read_mostly);
    case cudaMemRangeAttributePreferredLocation: return put(a->preferred);
    case cudaMemRangeAttributeLastPrefetchLocation: return put(a->last_prefetch);
    case cudaMemRangeAttributePreferredLocationType: return put(static_cast<int>(type_of(a->preferred)));
    case cudaMemRangeAttributePreferredLocationId: return put(a->preferred < 0 ? 0 : a->preferred);
    case cudaMemRangeAttributeLastPrefetchLocationType: return put(static_cast<int>(type_of(a->last_prefetch)));
    case cudaMemRangeAttributeLastPrefetchLocationId: return put(a->last_prefetch < 0 ? 0 : a->last_prefetch);
    case cudaMemRangeAttributeAccessedBy: {
      if (size % sizeof(int) != 0) return Error(Err::kInvalidValue, "dataSize {} is not a multiple of 4", size);
      int* out = static_cast<int*>(data);
      size_t k = 0;
      for (; k < size / sizeof(int) && k < a->accessed_by.size(); k++) out[k] = a->accessed_by[k];
      for (; k < size / sizeof(int); k++) out[k] = cudaInvalidDeviceId;
      return Status::Ok();
    }
    default:
      return Error(Err::kInvalidValue, "unknown range attribute {}", static_cast<int>(attr));
  }
}

cudaError_t AttachMem(cudaStream_t stream, void* p, size_t length, unsigned flags, const char* call) {
  Runtime& rt = Runtime::Get();
  auto c = rt.Session();
  if (!c.ok()) return Done(c.status(), call);
  int device = 0;
  Status st = rt.CheckStream(stream, &device);
  if (st.ok() && flags != cudaMemAttachGlobal && flags != cudaMemAttachHost && flags != cudaMemAttachSingle)
    st = Error(Err::kInvalidValue, "invalid attach flags 0x{:x}", flags);
  // length 0: the whole allocation p starts.
  if (st.ok()) st = CheckManaged(p, length);
  // Host access is coherent at every synchronisation anyway (managed.h): nothing to change.
  return Done(st, call);
}

}  // namespace
}  // namespace remora::shim

using namespace remora;
using namespace remora::shim;

REMORA_API cudaError_t cudaMallocManaged(void** devPtr, size_t size, unsigned int flags) {
  if (devPtr == nullptr) return Finish(Error(Err::kInvalidValue, "devPtr is NULL"), "cudaMallocManaged");
  if (size == 0) return Finish(Error(Err::kInvalidValue, "size is 0"), "cudaMallocManaged");
  if (flags != cudaMemAttachGlobal && flags != cudaMemAttachHost)
    return Finish(Error(Err::kInvalidValue, "invalid flags 0x{:x}", flags), "cudaMallocManaged");
  auto p = AllocateManaged(size, "cudaMallocManaged");
  if (!p.ok()) return Finish(p.status(), "cudaMallocManaged");
  *devPtr = *p;
  return cudaSuccess;
}

REMORA_API cudaError_t cudaMemPrefetchAsync(const void* devPtr, size_t count, cudaMemLocation location, unsigned int flags,
                                            cudaStream_t stream) {
  if (flags != 0) return Finish(Error(Err::kInvalidValue, "flags must be 0"), "cudaMemPrefetchAsync");
  return Done(Prefetch(devPtr, count, location, stream), "cudaMemPrefetchAsync");
}
REMORA_API cudaError_t cudaMemPrefetchAsync_ptsz(const void* devPtr, size_t count, cudaMemLocation location, unsigned int flags,
                                                 cudaStream_t stream) {
  return cudaMemPrefetchAsync(devPtr, count, location, flags, stream);
}

namespace {
cudaError_t PrefetchBatch(void** dptrs, size_t* sizes, size_t count, cudaMemLocation* locs, size_t* loc_idxs, size_t num_locs,
                          unsigned long long flags, cudaStream_t stream, const char* call) {
  if (flags != 0 || count == 0 || dptrs == nullptr || sizes == nullptr || locs == nullptr || loc_idxs == nullptr ||
      num_locs == 0 || num_locs > count || loc_idxs[0] != 0)
    return Finish(Error(Err::kInvalidValue, "invalid batch"), call);
  size_t loc = 0;
  for (size_t i = 0; i < count; i++) {
    if (loc + 1 < num_locs && loc_idxs[loc + 1] == i) loc++;
    Status st = Prefetch(dptrs[i], sizes[i], locs[loc], stream);
    if (!st.ok()) return Finish(st, call);
  }
  return cudaSuccess;
}
}  // namespace

REMORA_API cudaError_t cudaMemPrefetchBatchAsync(void** dptrs, size_t* sizes, size_t count, cudaMemLocation* prefetchLocs,
                                                 size_t* prefetchLocIdxs, size_t numPrefetchLocs, unsigned long long flags,
                                                 cudaStream_t stream) {
  return PrefetchBatch(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags, stream,
                       "cudaMemPrefetchBatchAsync");
}
REMORA_API cudaError_t cudaMemPrefetchBatchAsync_ptsz(void** dptrs, size_t* sizes, size_t count, cudaMemLocation* prefetchLocs,
                                                      size_t* prefetchLocIdxs, size_t numPrefetchLocs, unsigned long long flags,
                                                      cudaStream_t stream) {
  return cudaMemPrefetchBatchAsync(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags, stream);
}

// Discarding allows the contents to change: keeping them is a valid discard.
REMORA_API cudaError_t cudaMemDiscardBatchAsync(void** dptrs, size_t* sizes, size_t count, unsigned long long flags,
                                                cudaStream_t stream) {
  if (flags != 0 || dptrs == nullptr || sizes == nullptr)
    return Finish(Error(Err::kInvalidValue, "invalid batch"), "cudaMemDiscardBatchAsync");
  int device = 0;
  Status st = Runtime::Get().CheckStream(stream, &device);
  for (size_t i = 0; st.ok() && i < count; i++) st = CheckManaged(dptrs[i], sizes[i]);
  return Finish(st, "cudaMemDiscardBatchAsync");
}
REMORA_API cudaError_t cudaMemDiscardBatchAsync_ptsz(void** dptrs, size_t* sizes, size_t count, unsigned long long flags,
                                                     cudaStream_t stream) {
  return cudaMemDiscardBatchAsync(dptrs, sizes, count, flags, stream);
}
REMORA_API cudaError_t cudaMemDiscardAndPrefetchBatchAsync(void** dptrs, size_t* sizes, size_t count,
                                                           cudaMemLocation* prefetchLocs, size_t* prefetchLocIdxs,
                                                           size_t numPrefetchLocs, unsigned long long flags,
                                                           cudaStream_t stream) {
  return PrefetchBatch(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags, stream,
                       "cudaMemDiscardAndPrefetchBatchAsync");
}
REMORA_API cudaError_t cudaMemDiscardAndPrefetchBatchAsync_ptsz(void** dptrs, size_t* sizes, size_t count,
                                                                cudaMemLocation* prefetchLocs, size_t* prefetchLocIdxs,
                                                                size_t numPrefetchLocs, unsigned long long flags,
                                                                cudaStream_t stream) {
  return cudaMemDiscardAndPrefetchBatchAsync(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags,
                                             stream);
}

REMORA_API cudaError_t cudaMemAdvise(const void* devPtr, size_t count, cudaMemoryAdvise advice, cudaMemLocation location) {
  return Done(Advise(devPtr, count, advice, location), "cudaMemAdvise");
}

REMORA_API cudaError_t cudaMemRangeGetAttribute(void* data, size_t dataSize, cudaMemRangeAttribute attribute,
                                                const void* devPtr, size_t count) {
  return Done(RangeAttribute(data, dataSize, attribute, devPtr, count), "cudaMemRangeGetAttribute");
}

REMORA_API cudaError_t cudaMemRangeGetAttributes(void** data, size_t* dataSizes, cudaMemRangeAttribute* attributes,
                                                 size_t numAttributes, const void* devPtr, size_t count) {
  if (data == nullptr || dataSizes == nullptr || attributes == nullptr || numAttributes == 0)
    return Finish(Error(Err::kInvalidValue, "a NULL array or no attributes"), "cudaMemRangeGetAttributes");
  for (size_t i = 0; i < numAttributes; i++) {
    Status st = RangeAttribute(data[i], dataSizes[i], attributes[i], devPtr, count);
    if (!st.ok()) return Finish(st, "cudaMemRangeGetAttributes");
  }
  return cudaSuccess;
}

REMORA_API cudaError_t cudaStreamAttachMemAsync(cudaStream_t stream, void* devPtr, size_t length, unsigned int flags) {
  return AttachMem(stream, devPtr, length, flags, "cudaStreamAttachMemAsync");
}
REMORA_API cudaError_t cudaStreamAttachMemAsync_ptsz(cudaStream_t stream, void* devPtr, size_t length, unsigned int flags) {
  return AttachMem(stream, devPtr, length, flags, "cudaStreamAttachMemAsync");
}
