// Stream-ordered allocation (cudaMallocAsync/cudaFreeAsync) and memory pools. Pool handles
// are worker handles, like streams; every allocation is charged to the tenant. Pools shared
// between processes travel as the driver API's internal entries (protocol/api/cuda.api
// @163-@166; the worker's end is server/worker/ipc/pool_ipc_hooks.h): a pool's shareable handle is
// a descriptor holding the server's capability (shareable_handle.h), a pointer's export data
// the capability itself.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>

#include "cuda_client.h"
#include "export.h"
#include "memory_core.h"
#include "remote_call.h"
#include "runtime.h"
#include "shareable_handle.h"
#include "wire_args.h"

namespace remora::shim {

Status AllocateAsync(size_t size, cudaMemPool_t pool, cudaStream_t stream, bool per_thread, void** ptr) {
  if (ptr == nullptr) return Error(Err::kInvalidValue, "the pointer's out-pointer is NULL");
  Runtime& rt = Runtime::Get();
  ASSIGN_OR_RETURN(Client * c, rt.Session());
  int device = 0;
  RETURN_IF_ERROR(rt.CheckStream(stream, &device));
  uint64_t p = 0;
  AllocKind kind = AllocKind::kDeviceAsync;
  RETURN_IF_ERROR(c->Call(device, [&](wire::Request::Builder& r) {
    auto m = r.initMallocAsync();
    m.setSize(size);
    SetStream(m.initStream(), stream, per_thread);
    m.setPool(U(pool));
  }, [&](wire::Reply::Reader& r) -> Status {
    if (r.isGraphPointer()) {
      // In a stream capture: the capture's graph allocates it (an allocation node); its
      // address stays the graph's, whatever frees it (FreeAsync).
      p = r.getGraphPointer();
      kind = AllocKind::kGraphMemory;
    } else {
      p = r.getPointer();
    }
    return Status::Ok();
  }));
  if (p != 0) rt.AddDeviceAllocation(p, size, device, kind);
  *ptr = reinterpret_cast<void*>(p);
  return Status::Ok();
}

Status FreeAsync(void* ptr, cudaStream_t stream, bool per_thread) {
  Runtime& rt = Runtime::Get();
  ASSIGN_OR_RETURN(Client * c, rt.Session());
  int device = 0;
  RETURN_IF_ERROR(rt.CheckStream(stream, &device));
  if (ptr == nullptr) return Status::Ok();
  auto a = rt.FindDevice(U(ptr));
  // Inside a graph's memory the worker tells a node's address from an interior one.
  if (!a || (a->base != U(ptr) && a->kind != AllocKind::kGraphMemory) || a->kind == AllocKind::kModule)
    return Error(Err::kInvalidValue, "{} is not a device allocation of this process", ptr);
  // A graph's memory keeps its address (the graph allocates it again at its next launch).
  if (a->kind != AllocKind::kGraphMemory) (void)rt.RemoveDeviceAllocation(U(ptr));
  return c->Post(device, [&](wire::Request::Builder& r) {
    auto m = r.initFreeAsync();
    m.setPtr(U(ptr));
    SetStream(m.initStream(), stream, per_thread);
  });
}

namespace {

// A pool request answered with a handle (creation) or nothing.
template <typename Build>
Status PoolCall(int device, Build build, uint64_t* handle, int64_t* value) {
  ASSIGN_OR_RETURN(Client * c, Runtime::Get().Session());
  return c->Call(device, build, [&](wire::Reply::Reader& r) -> Status {
    if (handle != nullptr) *handle = r.getHandle();
    if (value != nullptr) *value = r.getValue();
    return Status::Ok();
  });
}

}  // namespace
}  // namespace remora::shim

using namespace remora;
using namespace remora::shim;

REMORA_API cudaError_t cudaMallocAsync(void** devPtr, size_t size, cudaStream_t hStream) {
  if (devPtr == nullptr) return Finish(Error(Err::kInvalidValue, "devPtr is NULL"), "cudaMallocAsync");
  return Finish(AllocateAsync(size, nullptr, hStream, false, devPtr), "cudaMallocAsync");
}
REMORA_API cudaError_t cudaMallocAsync_ptsz(void** devPtr, size_t size, cudaStream_t hStream) {
  if (devPtr == nullptr) return Finish(Error(Err::kInvalidValue, "devPtr is NULL"), "cudaMallocAsync");
  return Finish(AllocateAsync(size, nullptr, hStream, true, devPtr), "cudaMallocAsync");
}
REMORA_API cudaError_t cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream) {
  if (memPool == nullptr) return Finish(Error(Err::kInvalidValue, "memPool is NULL"), "cudaMallocFromPoolAsync");
  return Finish(AllocateAsync(size, memPool, stream, false, ptr), "cudaMallocFromPoolAsync");
}
REMORA_API cudaError_t cudaMallocFromPoolAsync_ptsz(void** ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream) {
  if (memPool == nullptr) return Finish(Error(Err::kInvalidValue, "memPool is NULL"), "cudaMallocFromPoolAsync");
  return Finish(AllocateAsync(size, memPool, stream, true, ptr), "cudaMallocFromPoolAsync");
}
REMORA_API cudaError_t cudaFreeAsync(void* devPtr, cudaStream_t hStream) {
  return Finish(FreeAsync(devPtr, hStream, false), "cudaFreeAsync");
}
REMORA_API cudaError_t cudaFreeAsync_ptsz(void* devPtr, cudaStream_t hStream) {
  return Finish(FreeAsync(devPtr, hStream, true), "cudaFreeAsync");
}

REMORA_API cudaError_t cudaMemPoolCreate(cudaMemPool_t* memPool, const cudaMemPoolProps* props) {
  if (memPool == nullptr || props == nullptr) return Finish(Error(Err::kInvalidValue, "NULL argument"), "cudaMemPoolCreate");
  if (props->allocType != cudaMemAllocationTypePinned || props->location.type != cudaMemLocationTypeDevice)
    return Finish(Error(Err::kNotSupported, "only device-resident pinned pools are supported by Remora"), "cudaMemPoolCreate");
  CUmemoryPool pool = nullptr;
  Status st = gen::cuda::remoraMemPoolCreate(CallCtx{false, "cudaMemPoolCreate"}, &pool, props->location.id, props->maxSize,
                                             static_cast<unsigned>(props->handleTypes));
  if (st.ok()) *memPool = reinterpret_cast<cudaMemPool_t>(pool);
  return Finish(st, "cudaMemPoolCreate");
}

REMORA_API cudaError_t cudaMemPoolDestroy(cudaMemPool_t memPool) {
  return Finish(gen::cuda::cuMemPoolDestroy(CallCtx{false, "cudaMemPoolDestroy"}, reinterpret_cast<CUmemoryPool>(memPool)),
                "cudaMemPoolDestroy");
}

namespace {

static_assert(sizeof(cudaMemPoolPtrExportData) == sizeof(CUipcMemHandle));

cudaError_t Done(const Status& st, const char* call) { return static_cast<cudaError_t>(FinishApi(Domain::kCudart, st, call)); }

cudaError_t UnsupportedHandleType(const char* call, int type) {
  return Finish(Error(Err::kNotSupported,
                      "handle type {} is not supported: Remora shares memory pools by POSIX file descriptor "
                      "(cudaMemHandleTypePosixFileDescriptor) between applications of one server", type),
                call);
}

}  // namespace

REMORA_API cudaError_t cudaMemPoolExportToShareableHandle(void* shareableHandle, cudaMemPool_t memPool,
                                                          cudaMemAllocationHandleType handleType, unsigned int flags) {
  constexpr const char* kCall = "cudaMemPoolExportToShareableHandle";
  if (shareableHandle == nullptr || memPool == nullptr) return Finish(Error(Err::kInvalidValue, "NULL argument"), kCall);
  if (flags != 0) return Finish(Error(Err::kInvalidValue, "flags must be 0"), kCall);
  if (handleType != cudaMemHandleTypePosixFileDescriptor) return UnsupportedHandleType(kCall, handleType);
  CUipcMemHandle capability;
  Status st = gen::cuda::remoraPoolExportShareable(CallCtx{false, kCall}, &capability, U(memPool));
  if (!st.ok()) return Done(st, kCall);
  auto fd = WriteShareableHandle(ShareableKind::kPool, capability);
  if (!fd.ok()) return Finish(fd.status(), kCall);
  *static_cast<int*>(shareableHandle) = *fd;
  return cudaSuccess;
}

REMORA_API cudaError_t cudaMemPoolImportFromShareableHandle(cudaMemPool_t* memPool, void* shareableHandle,
                                                            cudaMemAllocationHandleType handleType, unsigned int flags) {
  constexpr const char* kCall = "cudaMemPoolImportFromShareableHandle";
  if (memPool == nullptr) return Finish(Error(Err::kInvalidValue, "memPool is NULL"), kCall);
  if (flags != 0) return Finish(Error(Err::kInvalidValue, "flags must be 0"), kCall);
  if (handleType != cudaMemHandleTypePosixFileDescriptor) return UnsupportedHandleType(kCall, handleType);
  // The descriptor is the pointer's value, as the runtime takes it; it stays the caller's.
  auto capability = ReadShareableHandle(ShareableKind::kPool, static_cast<int>(reinterpret_cast<intptr_t>(shareableHandle)));
  if (!capability.ok()) return Finish(capability.status(), kCall);
  unsigned long long pool = 0;
  Status st = gen::cuda::remoraPoolImportShareable(CallCtx{false, kCall}, &pool, *capability);
  if (st.ok()) *memPool = reinterpret_cast<cudaMemPool_t>(pool);
  return Done(st, kCall);
}

REMORA_API cudaError_t cudaMemPoolExportPointer(cudaMemPoolPtrExportData* exportData, void* ptr) {
  constexpr const char* kCall = "cudaMemPoolExportPointer";
  if (exportData == nullptr) return Finish(Error(Err::kInvalidValue, "exportData is NULL"), kCall);
  CUipcMemHandle capability;
  Status st = gen::cuda::remoraPoolExportPointer(CallCtx{false, kCall}, &capability, U(ptr));
  if (st.ok()) std::memcpy(exportData, &capability, sizeof(capability));
  return Done(st, kCall);
}

REMORA_API cudaError_t cudaMemPoolImportPointer(void** ptr, cudaMemPool_t memPool, cudaMemPoolPtrExportData* exportData) {
  constexpr const char* kCall = "cudaMemPoolImportPointer";
  if (ptr == nullptr || exportData == nullptr || memPool == nullptr)
    return Finish(Error(Err::kInvalidValue, "NULL argument"), kCall);
  CUipcMemHandle capability;
  std::memcpy(&capability, exportData, sizeof(capability));
  CUdeviceptr p = 0;
  size_t size = 0;
  Status st = gen::cuda::remoraPoolImportPointer(CallCtx{false, kCall}, &p, &size, U(memPool), capability);
  if (!st.ok()) return Done(st, kCall);
  // A device allocation of this process from now on; cudaFree/cudaFreeAsync give it back.
  Runtime::Get().AddDeviceAllocation(p, size, Thread().device, AllocKind::kDeviceAsync);
  *ptr = reinterpret_cast<void*>(p);
  return cudaSuccess;
}
