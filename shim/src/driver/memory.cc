// The driver API's memory: allocation (device, pitched, host, stream-ordered, pools), copies
// and memsets, the tenant's view of free memory, address ranges. They are the runtime's
// (shim/src/api_memory*.cc, api_pool.cc) on the current context's device: the same checks,
// the same data paths, the same quota. What a created context allocates goes with it.
#include <cstring>
#include <optional>

#include "arrays.h"
#include "callbacks.h"
#include "cuda_client.h"
#include "driver/contexts.h"
#include "driver/driver.h"
#include "export.h"
#include "memops.h"
#include "memory_core.h"
#include "pinned_core.h"
#include "process.h"
#include "runtime.h"
#include "stream_core.h"

// The runtime's per-thread-stream entry points (defined in the core, not declared by the
// CUDA headers without --default-stream per-thread).
extern "C" {
cudaError_t cudaMemcpy_ptds(void*, const void*, size_t, cudaMemcpyKind);
cudaError_t cudaMemcpyAsync_ptsz(void*, const void*, size_t, cudaMemcpyKind, cudaStream_t);
cudaError_t cudaMemcpy2D_ptds(void*, size_t, const void*, size_t, size_t, size_t, cudaMemcpyKind);
cudaError_t cudaMemcpy2DAsync_ptsz(void*, size_t, const void*, size_t, size_t, size_t, cudaMemcpyKind, cudaStream_t);
cudaError_t cudaMallocAsync_ptsz(void**, size_t, cudaStream_t);
cudaError_t cudaFreeAsync_ptsz(void*, cudaStream_t);
cudaError_t cudaMallocFromPoolAsync_ptsz(void**, size_t, cudaMemPool_t, cudaStream_t);
}

using namespace remora;
using namespace remora::shim;
using namespace remora::shim::driver;

namespace {

void* P(CUdeviceptr p) { return reinterpret_cast<void*>(static_cast<uintptr_t>(p)); }

void Own(uint64_t handle) { Process::Get().contexts().Own(handle, &Owned::allocations); }

// The runtime's copy kind for a driver memory type pair (an array is device memory).
Result<cudaMemcpyKind> KindOf(CUmemorytype src, CUmemorytype dst) {
  auto side = [](CUmemorytype t) -> int {
    switch (t) {
      case CU_MEMORYTYPE_HOST: return 0;
      case CU_MEMORYTYPE_DEVICE:
      case CU_MEMORYTYPE_ARRAY: return 1;
      case CU_MEMORYTYPE_UNIFIED: return 2;
      default: return -1;
    }
  };
  int s = side(src), d = side(dst);
  if (s < 0 || d < 0) return Status(Domain::kCuda, CUDA_ERROR_INVALID_VALUE, "unknown memory type");
  if (s == 2 || d == 2) return cudaMemcpyDefault;
  static constexpr cudaMemcpyKind kKinds[2][2] = {{cudaMemcpyHostToHost, cudaMemcpyHostToDevice},
                                                  {cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice}};
  return kKinds[s][d];
}

const void* Src2D(const CUDA_MEMCPY2D* c) {
  const char* base = c->srcMemoryType == CU_MEMORYTYPE_HOST ? static_cast<const char*>(c->srcHost)
                                                            : static_cast<const char*>(P(c->srcDevice));
  return base + c->srcY * c->srcPitch + c->srcXInBytes;
}
void* Dst2D(const CUDA_MEMCPY2D* c) {
  char* base = c->dstMemoryType == CU_MEMORYTYPE_HOST ? static_cast<char*>(c->dstHost) : static_cast<char*>(P(c->dstDevice));
  return base + c->dstY * c->dstPitch + c->dstXInBytes;
}

// One side of a driver 2D/3D copy as an array copy's side (shim/src/arrays.h).
ArraySide SideOf(CUmemorytype type, const void* host, CUdeviceptr dev, CUarray array, size_t x, size_t y, size_t z,
                 size_t pitch, size_t height) {
  ArraySide s;
  if (type == CU_MEMORYTYPE_ARRAY) {
    s.kind = ArraySide::kArray;
    s.array = reinterpret_cast<uint64_t>(array);
    s.x = x;
    s.y = y;
    s.z = z;
    return s;
  }
  const char* base = type == CU_MEMORYTYPE_HOST ? static_cast<const char*>(host) : static_cast<const char*>(P(dev));
  s.ptr = base == nullptr ? nullptr : const_cast<char*>(base) + (z * height + y) * pitch + x;
  s.pitch = pitch;
  s.rows = height;
  return s;
}

CUresult Copy2D(const CUDA_MEMCPY2D* c, CUstream stream, bool async, bool per_thread, const char* call) {
  if (c == nullptr) return Invalid(call, "pCopy is NULL");
  auto kind = KindOf(c->srcMemoryType, c->dstMemoryType);
  if (!kind.ok()) return FromStatus(kind.status(), call);
  if (c->srcMemoryType == CU_MEMORYTYPE_ARRAY || c->dstMemoryType == CU_MEMORYTYPE_ARRAY) {
    ArraySide dst = SideOf(c->dstMemoryType, c->dstHost, c->dstDevice, c->dstArray, c->dstXInBytes, c->dstY, 0,
                           c->dstPitch ? c->dstPitch : c->WidthInBytes, c->Height);
    ArraySide src = SideOf(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcArray, c->srcXInBytes, c->srcY, 0,
                           c->srcPitch ? c->srcPitch : c->WidthInBytes, c->Height);
    return InContext(call, [&] {
      return ArrayCopy(dst, src, c->WidthInBytes, c->Height, 1, *kind, stream, per_thread, async, call);
    });
  }
  size_t dp = c->dstPitch ? c->dstPitch : c->WidthInBytes, sp = c->srcPitch ? c->srcPitch : c->WidthInBytes;
  return CallInContext(call, [&] {
    return CopyStridedMemory(Dst2D(c), dp, c->Height, Src2D(c), sp, c->Height, c->WidthInBytes, c->Height, 1, *kind,
                             reinterpret_cast<cudaStream_t>(stream), per_thread, async);
  });
}

CUresult Copy3D(const CUDA_MEMCPY3D* c, CUstream stream, bool async, bool per_thread, const char* call) {
  if (c == nullptr) return Invalid(call, "pCopy is NULL");
  auto kind = KindOf(c->srcMemoryType, c->dstMemoryType);
  if (!kind.ok()) return FromStatus(kind.status(), call);
  size_t sp = c->srcPitch ? c->srcPitch : c->WidthInBytes, sh = c->srcHeight ? c->srcHeight : c->Height;
  size_t dp = c->dstPitch ? c->dstPitch : c->WidthInBytes, dh = c->dstHeight ? c->dstHeight : c->Height;
  ArraySide dst = SideOf(c->dstMemoryType, c->dstHost, c->dstDevice, c->dstArray, c->dstXInBytes, c->dstY, c->dstZ, dp, dh);
  ArraySide src = SideOf(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcArray, c->srcXInBytes, c->srcY, c->srcZ, sp, sh);
  if (dst.kind == ArraySide::kArray || src.kind == ArraySide::kArray)
    return InContext(call, [&] {
      return ArrayCopy(dst, src, c->WidthInBytes, c->Height, c->Depth, *kind, stream, per_thread, async, call);
    });
  return CallInContext(call, [&] {
    return CopyStridedMemory(dst.ptr, dp, dh, src.ptr, sp, sh, c->WidthInBytes, c->Height, c->Depth, *kind,
                             reinterpret_cast<cudaStream_t>(stream), per_thread, async);
  });
}

}  // namespace

// ---- allocation ----------------------------------------------------------------------------

REMORA_API CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) {
  if (dptr == nullptr) return Invalid("cuMemAlloc", "dptr is NULL");
  if (bytes == 0) return Invalid("cuMemAlloc", "bytesize is 0");
  void* p = nullptr;
  CUresult r = CallInContext("cuMemAlloc", [&] { return AllocateDevice(bytes, &p); });
  if (r == CUDA_SUCCESS) {
    *dptr = reinterpret_cast<CUdeviceptr>(p);
    Own(*dptr);
  }
  return r;
}

REMORA_API CUresult cuMemFree_v2(CUdeviceptr dptr) { return Done(FreeDevice(P(dptr)), "cuMemFree"); }

REMORA_API CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height, unsigned int element) {
  if (dptr == nullptr || pitch == nullptr) return Invalid("cuMemAllocPitch", "NULL argument");
  if (element != 4 && element != 8 && element != 16) return Invalid("cuMemAllocPitch", "ElementSizeBytes must be 4, 8 or 16");
  CUresult r = CallInContext("cuMemAllocPitch", [&] {
    return gen::cuda::cuMemAllocPitch_v2(CallCtx{false, "cuMemAllocPitch"}, dptr, pitch, width, height, element);
  });
  if (r == CUDA_SUCCESS && *dptr != 0) Own(*dptr);
  return r;
}

REMORA_API CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
  if (free == nullptr || total == nullptr) return Invalid("cuMemGetInfo", "NULL argument");
  return CallInContext("cuMemGetInfo", [&] { return DeviceMemoryInfo(free, total); });  // the tenant's view
}

REMORA_API CUresult cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size, CUdeviceptr dptr) {
  auto a = Runtime::Get().FindDevice(dptr);
  if (!a) return CUDA_ERROR_NOT_FOUND;
  if (base != nullptr) *base = a->base;
  if (size != nullptr) *size = a->size;
  return CUDA_SUCCESS;
}

// Pinned memory (pinned_core.h, shared with the runtime), allocated and registered on the
// current context's device.
REMORA_API CUresult cuMemAllocHost_v2(void** pp, size_t bytes) {
  if (pp == nullptr) return Invalid("cuMemAllocHost", "pp is NULL");
  return CallInContext("cuMemAllocHost", [&] { return AllocatePinned(bytes, 0, "cuMemAllocHost", pp); });
}

REMORA_API CUresult cuMemHostAlloc(void** pp, size_t bytes, unsigned int flags) {
  if (pp == nullptr) return Invalid("cuMemHostAlloc", "pp is NULL");
  // CU_MEMHOSTALLOC_PORTABLE/DEVICEMAP/WRITECOMBINED are cudaHostAlloc's flag values.
  return CallInContext("cuMemHostAlloc", [&] { return AllocatePinned(bytes, flags, "cuMemHostAlloc", pp); });
}

REMORA_API CUresult cuMemFreeHost(void* p) { return Done(FreePinned(p), "cuMemFreeHost"); }

REMORA_API CUresult cuMemHostRegister_v2(void* p, size_t bytes, unsigned int flags) {
  return CallInContext("cuMemHostRegister", [&] { return RegisterHost(p, bytes, flags); });
}

REMORA_API CUresult cuMemHostUnregister(void* p) { return Done(UnregisterHost(p), "cuMemHostUnregister"); }

REMORA_API CUresult cuMemHostGetFlags(unsigned int* flags, void* p) { return Done(PinnedFlags(p, flags), "cuMemHostGetFlags"); }

REMORA_API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* dptr, void* p, unsigned int flags) {
  if (dptr == nullptr) return Invalid("cuMemHostGetDevicePointer", "pdptr is NULL");
  void* d = nullptr;
  CUresult r = CallInContext("cuMemHostGetDevicePointer", [&] { return PinnedDevicePointer(p, flags, &d); });
  if (r == CUDA_SUCCESS) *dptr = reinterpret_cast<CUdeviceptr>(d);
  return r;
}

// Stream-ordered allocation (memory_core.h, shared with the runtime).
static CUresult AllocAsync(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool, CUstream stream, bool per_thread, const char* call) {
  if (dptr == nullptr) return Invalid(call, "dptr is NULL");
  void* p = nullptr;
  Status st = AllocateAsync(bytes, reinterpret_cast<cudaMemPool_t>(pool), reinterpret_cast<cudaStream_t>(stream), per_thread, &p);
  if (st.ok()) *dptr = reinterpret_cast<CUdeviceptr>(p);
  return Done(st, call);
}

REMORA_API CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytes, CUstream stream) {
  return AllocAsync(dptr, bytes, nullptr, stream, false, "cuMemAllocAsync");
}
REMORA_API CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytes, CUstream stream) {
  return AllocAsync(dptr, bytes, nullptr, stream, true, "cuMemAllocAsync");
}
REMORA_API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream) {
  return Done(FreeAsync(P(dptr), reinterpret_cast<cudaStream_t>(stream), false), "cuMemFreeAsync");
}
REMORA_API CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream) {
  return Done(FreeAsync(P(dptr), reinterpret_cast<cudaStream_t>(stream), true), "cuMemFreeAsync");
}
REMORA_API CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool, CUstream stream) {
  if (pool == nullptr) return Invalid("cuMemAllocFromPoolAsync", "pool is NULL");
  return AllocAsync(dptr, bytes, pool, stream, false, "cuMemAllocFromPoolAsync");
}
REMORA_API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool, CUstream stream) {
  if (pool == nullptr) return Invalid("cuMemAllocFromPoolAsync", "pool is NULL");
  return AllocAsync(dptr, bytes, pool, stream, true, "cuMemAllocFromPoolAsync");
}

REMORA_API CUresult cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* props) {
  if (pool == nullptr || props == nullptr) return Invalid("cuMemPoolCreate", "NULL argument");
  if (props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED || props->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
    return FromStatus(Status(Domain::kCuda, CUDA_ERROR_NOT_SUPPORTED, "only device-resident pinned pools are supported by Remora"),
                      "cuMemPoolCreate");
  return Done(gen::cuda::remoraMemPoolCreate(CallCtx{false, "cuMemPoolCreate"}, pool, props->location.id, props->maxSize,
                                             static_cast<unsigned>(props->handleTypes)),
              "cuMemPoolCreate");
}

REMORA_API CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  return Done(gen::cuda::cuMemPoolDestroy(CallCtx{false, "cuMemPoolDestroy"}, pool), "cuMemPoolDestroy");
}

// Pools shared between processes: the runtime's calls (CUmemPoolPtrExportData and
// cudaMemPoolPtrExportData have the same layout, the handle types the same values).
REMORA_API CUresult cuMemPoolExportToShareableHandle(void* handle_out, CUmemoryPool pool,
                                                     CUmemAllocationHandleType handleType, unsigned long long flags) {
  if (flags > UINT32_MAX) return Invalid("cuMemPoolExportToShareableHandle", "flags must be 0");
  return ViaRuntime([&] {
    return cudaMemPoolExportToShareableHandle(handle_out, reinterpret_cast<cudaMemPool_t>(pool),
                                              static_cast<cudaMemAllocationHandleType>(handleType),
                                              static_cast<unsigned>(flags));
  });
}
REMORA_API CUresult cuMemPoolImportFromShareableHandle(CUmemoryPool* pool_out, void* handle,
                                                       CUmemAllocationHandleType handleType, unsigned long long flags) {
  if (flags > UINT32_MAX) return Invalid("cuMemPoolImportFromShareableHandle", "flags must be 0");
  return ViaRuntime([&] {
    return cudaMemPoolImportFromShareableHandle(reinterpret_cast<cudaMemPool_t*>(pool_out), handle,
                                                static_cast<cudaMemAllocationHandleType>(handleType),
                                                static_cast<unsigned>(flags));
  });
}
REMORA_API CUresult cuMemPoolExportPointer(CUmemPoolPtrExportData* shareData_out, CUdeviceptr ptr) {
  return ViaRuntime([&] {
    return cudaMemPoolExportPointer(reinterpret_cast<cudaMemPoolPtrExportData*>(shareData_out), P(ptr));
  });
}
REMORA_API CUresult cuMemPoolImportPointer(CUdeviceptr* ptr_out, CUmemoryPool pool, CUmemPoolPtrExportData* shareData) {
  return ViaRuntime([&] {
    return cudaMemPoolImportPointer(reinterpret_cast<void**>(ptr_out), reinterpret_cast<cudaMemPool_t>(pool),
                                    reinterpret_cast<cudaMemPoolPtrExportData*>(shareData));
  });
}

// ---- copies ----------------------------------------------------------------------------------

// Copies (memops.h, shared with the runtime): a synchronous one on the current context's
// device, an asynchronous one on its stream's.
static CUresult CopySync(void* dst, const void* src, size_t n, cudaMemcpyKind kind, bool per_thread, const char* call) {
  return CallInContext(call, [&] { return CopyMemory(dst, src, n, kind, nullptr, per_thread, false); });
}
static CUresult CopyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind, CUstream s, bool per_thread,
                          const char* call) {
  return Done(CopyMemory(dst, src, n, kind, reinterpret_cast<cudaStream_t>(s), per_thread, true), call);
}

REMORA_API CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return CopySync(P(dst), P(src), n, cudaMemcpyDefault, false, "cuMemcpy");
}
REMORA_API CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return CopySync(P(dst), P(src), n, cudaMemcpyDefault, true, "cuMemcpy");
}
REMORA_API CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return CopyAsync(P(dst), P(src), n, cudaMemcpyDefault, s, false, "cuMemcpyAsync");
}
REMORA_API CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return CopyAsync(P(dst), P(src), n, cudaMemcpyDefault, s, true, "cuMemcpyAsync");
}

REMORA_API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
  return CopySync(P(dst), src, n, cudaMemcpyHostToDevice, false, "cuMemcpyHtoD");
}
REMORA_API CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void* src, size_t n) {
  return CopySync(P(dst), src, n, cudaMemcpyHostToDevice, true, "cuMemcpyHtoD");
}
REMORA_API CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
  return CopySync(dst, P(src), n, cudaMemcpyDeviceToHost, false, "cuMemcpyDtoH");
}
REMORA_API CUresult cuMemcpyDtoH_v2_ptds(void* dst, CUdeviceptr src, size_t n) {
  return CopySync(dst, P(src), n, cudaMemcpyDeviceToHost, true, "cuMemcpyDtoH");
}
REMORA_API CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return CopySync(P(dst), P(src), n, cudaMemcpyDeviceToDevice, false, "cuMemcpyDtoD");
}
REMORA_API CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return CopySync(P(dst), P(src), n, cudaMemcpyDeviceToDevice, true, "cuMemcpyDtoD");
}
REMORA_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  return CopyAsync(P(dst), src, n, cudaMemcpyHostToDevice, s, false, "cuMemcpyHtoDAsync");
}
REMORA_API CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  return CopyAsync(P(dst), src, n, cudaMemcpyHostToDevice, s, true, "cuMemcpyHtoDAsync");
}
REMORA_API CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  return CopyAsync(dst, P(src), n, cudaMemcpyDeviceToHost, s, false, "cuMemcpyDtoHAsync");
}
REMORA_API CUresult cuMemcpyDtoHAsync_v2_ptsz(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  return CopyAsync(dst, P(src), n, cudaMemcpyDeviceToHost, s, true, "cuMemcpyDtoHAsync");
}
REMORA_API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return CopyAsync(P(dst), P(src), n, cudaMemcpyDeviceToDevice, s, false, "cuMemcpyDtoDAsync");
}
REMORA_API CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return CopyAsync(P(dst), P(src), n, cudaMemcpyDeviceToDevice, s, true, "cuMemcpyDtoDAsync");
}

REMORA_API CUresult cuMemcpyPeer(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n) {
  auto d = Process::Get().contexts().Check(dctx);
  auto s = Process::Get().contexts().Check(sctx);
  if (!d.ok() || !s.ok()) return FromStatus(!d.ok() ? d.status() : s.status(), "cuMemcpyPeer");
  int dd = (*d)->device, sd = (*s)->device;
  return Done(CopyPeerMemory(P(dst), dd, P(src), sd, n, nullptr, "cuMemcpyPeer"), "cuMemcpyPeer");
}
REMORA_API CUresult cuMemcpyPeer_ptds(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n) {
  return cuMemcpyPeer(dst, dctx, src, sctx, n);
}
REMORA_API CUresult cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n,
                                      CUstream stream) {
  auto d = Process::Get().contexts().Check(dctx);
  auto s = Process::Get().contexts().Check(sctx);
  if (!d.ok() || !s.ok()) return FromStatus(!d.ok() ? d.status() : s.status(), "cuMemcpyPeerAsync");
  int dd = (*d)->device, sd = (*s)->device;
  return Done(CopyPeerMemory(P(dst), dd, P(src), sd, n, reinterpret_cast<cudaStream_t>(stream), "cuMemcpyPeerAsync"),
              "cuMemcpyPeerAsync");
}
REMORA_API CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n,
                                           CUstream stream) {
  return cuMemcpyPeerAsync(dst, dctx, src, sctx, n, stream);
}

REMORA_API CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D* c) { return Copy2D(c, nullptr, false, false, "cuMemcpy2D"); }
REMORA_API CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D* c) { return Copy2D(c, nullptr, false, true, "cuMemcpy2D"); }
REMORA_API CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D* c) {
  return Copy2D(c, nullptr, false, false, "cuMemcpy2DUnaligned");
}
REMORA_API CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D* c) {
  return Copy2D(c, nullptr, false, true, "cuMemcpy2DUnaligned");
}
REMORA_API CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D* c, CUstream s) { return Copy2D(c, s, true, false, "cuMemcpy2DAsync"); }
REMORA_API CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D* c, CUstream s) {
  return Copy2D(c, s, true, true, "cuMemcpy2DAsync");
}

REMORA_API CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D* c) { return Copy3D(c, nullptr, false, false, "cuMemcpy3D"); }
REMORA_API CUresult cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D* c) { return Copy3D(c, nullptr, false, true, "cuMemcpy3D"); }
REMORA_API CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D* c, CUstream s) { return Copy3D(c, s, true, false, "cuMemcpy3DAsync"); }
REMORA_API CUresult cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D* c, CUstream s) {
  return Copy3D(c, s, true, true, "cuMemcpy3DAsync");
}

// ---- memsets: the synchronous forms are the asynchronous ones on the default stream --------

// Where a memset of [d, d + bytes) goes. Pinned memory of this process is named by its own
// address (unified addressing makes it valid for a memset; XLA's autotuner fills its redzones
// so): memory shared with the worker at another address there is named by the worker's
// address, and memory the worker cannot reach (not shared with it: over tcp or RDMA) is
// written here, in stream order, as the GPU would write it over the bus natively.
struct MemsetTarget {
  CUdeviceptr device;         // what the worker is asked to set
  std::byte* host = nullptr;  // or: set here
};
static MemsetTarget TargetOf(CUdeviceptr d, size_t bytes) {
  Runtime& rt = Runtime::Get();
  if (rt.FindDevice(d)) return {d};
  auto h = rt.FindHost(reinterpret_cast<const void*>(d));
  if (!h || d - h->base > h->size || bytes > h->size - (d - h->base)) return {d};  // the worker says why
  if (uint64_t region = h->cookie >> 32; region != 0) {
    uint64_t device = rt.RegionDevicePointer(region);
    return {device != 0 ? device + (d - h->base) : d};
  }
  return {d, reinterpret_cast<std::byte*>(d)};
}

template <typename T, typename Remote>
static CUresult Memset(CUdeviceptr d, T v, size_t n, CUstream s, bool per_thread, const char* call, Remote remote) {
  MemsetTarget to = TargetOf(d, n * sizeof(T));
  if (to.host != nullptr && n != 0) {
    std::byte* at = to.host;
    return Done(QueueHostFunction(reinterpret_cast<cudaStream_t>(s), [at, v, n] {
      for (size_t i = 0; i < n; i++) std::memcpy(at + i * sizeof(T), &v, sizeof(T));
    }, per_thread), call);
  }
  return static_cast<CUresult>(FinishApi(Domain::kCuda, remote(CallCtx{per_thread, call}, to.device), call));
}

REMORA_API CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream s) {
  return Memset(d, v, n, s, false, "cuMemsetD8Async", [&](const CallCtx& cc, CUdeviceptr to) { return gen::cuda::cuMemsetD8Async(cc, to, v, n, s); });
}
REMORA_API CUresult cuMemsetD8Async_ptsz(CUdeviceptr d, unsigned char v, size_t n, CUstream s) {
  return Memset(d, v, n, s, true, "cuMemsetD8Async", [&](const CallCtx& cc, CUdeviceptr to) { return gen::cuda::cuMemsetD8Async(cc, to, v, n, s); });
}
REMORA_API CUresult cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, CUstream s) {
  return Memset(d, v, n, s, false, "cuMemsetD16Async", [&](const CallCtx& cc, CUdeviceptr to) { return gen::cuda::cuMemsetD16Async(cc, to, v, n, s); });
}
REMORA_API CUresult cuMemsetD16Async_ptsz(CUdeviceptr d, unsigned short v, size_t n, CUstream s) {
  return Memset(d, v, n, s, true, "cuMemsetD16Async", [&](const CallCtx& cc, CUdeviceptr to) { return gen::cuda::cuMemsetD16Async(cc, to, v, n, s); });
}
REMORA_API CUresult cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream s) {
  return Memset(d, v, n, s, false, "cuMemsetD32Async", [&](const CallCtx& cc, CUdeviceptr to) { return gen::cuda::cuMemsetD32Async(cc, to, v, n, s); });
}
REMORA_API CUresult cuMemsetD32Async_ptsz(CUdeviceptr d, unsigned int v, size_t n, CUstream s) {
  return Memset(d, v, n, s, true, "cuMemsetD32Async", [&](const CallCtx& cc, CUdeviceptr to) { return gen::cuda::cuMemsetD32Async(cc, to, v, n, s); });
}

// The synchronous memsets are asynchronous with respect to the host for device memory and
// fully synchronous for pinned host memory and managed memory (CUDA's API synchronisation
// behaviour): the host may read such memory as soon as they return.
template <typename Async>
static CUresult Synchronous(CUdeviceptr d, bool per_thread, Async async) {
  CUresult r = async();
  if (r != CUDA_SUCCESS) return r;
  Runtime& rt = Runtime::Get();
  if (!rt.managed().Contains(d) && !rt.FindHost(reinterpret_cast<const void*>(d))) return r;
  return cuStreamSynchronize(per_thread ? CU_STREAM_PER_THREAD : nullptr);
}

REMORA_API CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) {
  return Synchronous(d, false, [&] { return cuMemsetD8Async(d, v, n, nullptr); });
}
REMORA_API CUresult cuMemsetD8_v2_ptds(CUdeviceptr d, unsigned char v, size_t n) {
  return Synchronous(d, true, [&] { return cuMemsetD8Async_ptsz(d, v, n, nullptr); });
}
REMORA_API CUresult cuMemsetD16_v2(CUdeviceptr d, unsigned short v, size_t n) {
  return Synchronous(d, false, [&] { return cuMemsetD16Async(d, v, n, nullptr); });
}
REMORA_API CUresult cuMemsetD16_v2_ptds(CUdeviceptr d, unsigned short v, size_t n) {
  return Synchronous(d, true, [&] { return cuMemsetD16Async_ptsz(d, v, n, nullptr); });
}
REMORA_API CUresult cuMemsetD32_v2(CUdeviceptr d, unsigned int v, size_t n) {
  return Synchronous(d, false, [&] { return cuMemsetD32Async(d, v, n, nullptr); });
}
REMORA_API CUresult cuMemsetD32_v2_ptds(CUdeviceptr d, unsigned int v, size_t n) {
  return Synchronous(d, true, [&] { return cuMemsetD32Async_ptsz(d, v, n, nullptr); });
}
REMORA_API CUresult cuMemsetD2D8_v2(CUdeviceptr d, size_t pitch, unsigned char v, size_t w, size_t h) {
  return Synchronous(d, false, [&] { return cuMemsetD2D8Async(d, pitch, v, w, h, nullptr); });
}
REMORA_API CUresult cuMemsetD2D8_v2_ptds(CUdeviceptr d, size_t pitch, unsigned char v, size_t w, size_t h) {
  return Synchronous(d, true, [&] { return cuMemsetD2D8Async_ptsz(d, pitch, v, w, h, nullptr); });
}
REMORA_API CUresult cuMemsetD2D16_v2(CUdeviceptr d, size_t pitch, unsigned short v, size_t w, size_t h) {
  return Synchronous(d, false, [&] { return cuMemsetD2D16Async(d, pitch, v, w, h, nullptr); });
}
REMORA_API CUresult cuMemsetD2D16_v2_ptds(CUdeviceptr d, size_t pitch, unsigned short v, size_t w, size_t h) {
  return Synchronous(d, true, [&] { return cuMemsetD2D16Async_ptsz(d, pitch, v, w, h, nullptr); });
}
REMORA_API CUresult cuMemsetD2D32_v2(CUdeviceptr d, size_t pitch, unsigned int v, size_t w, size_t h) {
  return Synchronous(d, false, [&] { return cuMemsetD2D32Async(d, pitch, v, w, h, nullptr); });
}
REMORA_API CUresult cuMemsetD2D32_v2_ptds(CUdeviceptr d, size_t pitch, unsigned int v, size_t w, size_t h) {
  return Synchronous(d, true, [&] { return cuMemsetD2D32Async_ptsz(d, pitch, v, w, h, nullptr); });
}
