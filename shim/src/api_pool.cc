// Stream-ordered allocation (cudaMallocAsync/cudaFreeAsync) and memory pools. Pool handles
// are worker handles, like streams; every allocation is charged to the tenant.
#include <cuda_runtime_api.h>

#include "export.h"
#include "runtime.h"
#include "wire_args.h"

namespace remora::shim {
namespace {

cudaError_t MallocAsync(void** ptr, size_t size, cudaMemPool_t pool, cudaStream_t stream, bool per_thread, const char* call) {
  if (ptr == nullptr) return Finish(Error(Err::kInvalidValue, "devPtr is NULL"), call);
  Runtime& rt = Runtime::Get();
  auto c = rt.Session();
  if (!c.ok()) return Finish(c.status(), call);
  int device = 0;
  Status st = rt.CheckStream(stream, &device);
  if (!st.ok()) return Finish(st, call);
  uint64_t p = 0;
  st = (*c)->Call(device, [&](wire::Request::Builder& r) {
    auto m = r.initMallocAsync();
    m.setSize(size);
    SetStream(m.initStream(), stream, per_thread);
    m.setPool(U(pool));
  }, [&](wire::Reply::Reader& r) -> Status {
    p = r.getPointer();
    return Status::Ok();
  });
  if (!st.ok()) return Finish(st, call);
  if (p != 0) rt.AddDeviceAllocation(p, size, device, AllocKind::kDeviceAsync);
  *ptr = reinterpret_cast<void*>(p);
  return cudaSuccess;
}

cudaError_t FreeAsync(void* ptr, cudaStream_t stream, bool per_thread, const char* call) {
  Runtime& rt = Runtime::Get();
  auto c = rt.Session();
  if (!c.ok()) return Finish(c.status(), call);
  int device = 0;
  Status st = rt.CheckStream(stream, &device);
  if (!st.ok()) return Finish(st, call);
  if (ptr == nullptr) return cudaSuccess;
  auto a = rt.FindDevice(U(ptr));
  if (!a || a->base != U(ptr) || a->kind == AllocKind::kModule)
    return Finish(Error(Err::kInvalidValue, "{} is not a device allocation of this process", ptr), call);
  (void)rt.RemoveDeviceAllocation(U(ptr));
  st = (*c)->Post(device, [&](wire::Request::Builder& r) {
    auto m = r.initFreeAsync();
    m.setPtr(U(ptr));
    SetStream(m.initStream(), stream, per_thread);
  });
  return Finish(st, call);
}

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
  return MallocAsync(devPtr, size, nullptr, hStream, false, "cudaMallocAsync");
}
REMORA_API cudaError_t cudaMallocAsync_ptsz(void** devPtr, size_t size, cudaStream_t hStream) {
  return MallocAsync(devPtr, size, nullptr, hStream, true, "cudaMallocAsync");
}
REMORA_API cudaError_t cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream) {
  if (memPool == nullptr) return Finish(Error(Err::kInvalidValue, "memPool is NULL"), "cudaMallocFromPoolAsync");
  return MallocAsync(ptr, size, memPool, stream, false, "cudaMallocFromPoolAsync");
}
REMORA_API cudaError_t cudaMallocFromPoolAsync_ptsz(void** ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream) {
  if (memPool == nullptr) return Finish(Error(Err::kInvalidValue, "memPool is NULL"), "cudaMallocFromPoolAsync");
  return MallocAsync(ptr, size, memPool, stream, true, "cudaMallocFromPoolAsync");
}
REMORA_API cudaError_t cudaFreeAsync(void* devPtr, cudaStream_t hStream) { return FreeAsync(devPtr, hStream, false, "cudaFreeAsync"); }
REMORA_API cudaError_t cudaFreeAsync_ptsz(void* devPtr, cudaStream_t hStream) {
  return FreeAsync(devPtr, hStream, true, "cudaFreeAsync");
}

REMORA_API cudaError_t cudaMemPoolCreate(cudaMemPool_t* memPool, const cudaMemPoolProps* props) {
  if (memPool == nullptr || props == nullptr) return Finish(Error(Err::kInvalidValue, "NULL argument"), "cudaMemPoolCreate");
  if (props->allocType != cudaMemAllocationTypePinned || props->location.type != cudaMemLocationTypeDevice)
    return Finish(Error(Err::kNotSupported, "only device-resident pinned pools are supported by Remora"), "cudaMemPoolCreate");
  uint64_t h = 0;
  Status st = PoolCall(props->location.id, [&](wire::Request::Builder& r) {
    auto p = r.initPoolCreate();
    p.setDevice(props->location.id);
    p.setMaxSize(props->maxSize);
    p.setHandleTypes(static_cast<uint32_t>(props->handleTypes));
  }, &h, nullptr);
  if (st.ok()) *memPool = reinterpret_cast<cudaMemPool_t>(h);
  return Finish(st, "cudaMemPoolCreate");
}

REMORA_API cudaError_t cudaMemPoolDestroy(cudaMemPool_t memPool) {
  return Finish(PoolCall(Thread().device, [&](wire::Request::Builder& r) { r.setPoolDestroy(U(memPool)); }, nullptr, nullptr),
                "cudaMemPoolDestroy");
}

