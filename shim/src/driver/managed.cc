// The driver API's unified memory (cuMemAllocManaged, prefetch, advice, range attributes,
// stream attachment) and its batched and peer 3D copies. They are the runtime's
// (shim/src/api_managed.cc, api_memcpy_batch.cc) on the current context's device: the same
// coherence of the host's copy, the same quota, the same data paths. The runtime's and the
// driver's structures of these calls have one layout (checked below); only the peer copy's
// differs and is converted.
#include <cstddef>
#include <cstring>
#include <limits>

#include "driver/contexts.h"
#include "driver/driver.h"
#include "export.h"
#include "process.h"
#include "runtime.h"

// The runtime's per-thread-stream entry points (not declared by the CUDA headers without
// --default-stream per-thread).
extern "C" {
cudaError_t cudaMemPrefetchAsync_ptsz(const void*, size_t, cudaMemLocation, unsigned int, cudaStream_t);
cudaError_t cudaMemPrefetchBatchAsync_ptsz(void**, size_t*, size_t, cudaMemLocation*, size_t*, size_t, unsigned long long,
                                           cudaStream_t);
cudaError_t cudaMemDiscardBatchAsync_ptsz(void**, size_t*, size_t, unsigned long long, cudaStream_t);
cudaError_t cudaMemDiscardAndPrefetchBatchAsync_ptsz(void**, size_t*, size_t, cudaMemLocation*, size_t*, size_t,
                                                     unsigned long long, cudaStream_t);
cudaError_t cudaStreamAttachMemAsync_ptsz(cudaStream_t, void*, size_t, unsigned int);
cudaError_t cudaMemcpyBatchAsync_ptsz(void* const*, const void* const*, const size_t*, size_t, cudaMemcpyAttributes*,
                                      size_t*, size_t, cudaStream_t);
cudaError_t cudaMemcpy3DBatchAsync_ptsz(size_t, cudaMemcpy3DBatchOp*, unsigned long long, cudaStream_t);
cudaError_t cudaMemcpy3DPeer_ptds(const cudaMemcpy3DPeerParms*);
cudaError_t cudaMemcpy3DPeerAsync_ptsz(const cudaMemcpy3DPeerParms*, cudaStream_t);
}

using namespace remora;
using namespace remora::shim;
using namespace remora::shim::driver;

namespace {

static_assert(sizeof(CUmemLocation) == sizeof(cudaMemLocation) && offsetof(CUmemLocation, id) == offsetof(cudaMemLocation, id));
static_assert(sizeof(CUmemcpyAttributes) == sizeof(cudaMemcpyAttributes) &&
              offsetof(CUmemcpyAttributes, flags) == offsetof(cudaMemcpyAttributes, flags));
static_assert(sizeof(CUDA_MEMCPY3D_BATCH_OP) == sizeof(cudaMemcpy3DBatchOp) &&
              offsetof(CUDA_MEMCPY3D_BATCH_OP, extent) == offsetof(cudaMemcpy3DBatchOp, extent) &&
              offsetof(CUDA_MEMCPY3D_BATCH_OP, flags) == offsetof(cudaMemcpy3DBatchOp, flags));
static_assert(sizeof(CUmemcpy3DOperand) == sizeof(cudaMemcpy3DOperand));

void* P(CUdeviceptr p) { return reinterpret_cast<void*>(static_cast<uintptr_t>(p)); }

cudaMemLocation Loc(CUmemLocation l) { return cudaMemLocation{static_cast<cudaMemLocationType>(l.type), l.id}; }

// CUDA 11's device argument: CU_DEVICE_CPU is the host.
cudaMemLocation DeviceLoc(CUdevice d) {
  return d == CU_DEVICE_CPU ? cudaMemLocation{cudaMemLocationTypeHost, 0} : cudaMemLocation{cudaMemLocationTypeDevice, d};
}

cudaStream_t S(CUstream s) { return reinterpret_cast<cudaStream_t>(s); }

// The device of a peer copy's context (NULL: the current one).
Result<int> DeviceOf(CUcontext c) {
  if (c == nullptr) return CurrentDevice();
  ASSIGN_OR_RETURN(Context * ctx, Process::Get().contexts().Check(c));
  return ctx->device;
}

bool IsDeviceSide(CUmemorytype t, CUdeviceptr p) {
  return t == CU_MEMORYTYPE_DEVICE || (t == CU_MEMORYTYPE_UNIFIED && Runtime::Get().FindDevice(p));
}

// A peer copy: device to device between the contexts' devices, as cudaMemcpy3DPeer; with a
// host or array side the contexts do not matter and it is a plain 3D copy.
CUresult Copy3DPeer(const CUDA_MEMCPY3D_PEER* p, CUstream stream, bool per_thread, bool async, const char* call) {
  if (p == nullptr) return Invalid(call, "pCopy is NULL");
  if (!IsDeviceSide(p->srcMemoryType, p->srcDevice) || !IsDeviceSide(p->dstMemoryType, p->dstDevice)) {
    CUDA_MEMCPY3D m{};
    m.srcXInBytes = p->srcXInBytes, m.srcY = p->srcY, m.srcZ = p->srcZ, m.srcLOD = p->srcLOD;
    m.srcMemoryType = p->srcMemoryType, m.srcHost = p->srcHost, m.srcDevice = p->srcDevice, m.srcArray = p->srcArray;
    m.srcPitch = p->srcPitch, m.srcHeight = p->srcHeight;
    m.dstXInBytes = p->dstXInBytes, m.dstY = p->dstY, m.dstZ = p->dstZ, m.dstLOD = p->dstLOD;
    m.dstMemoryType = p->dstMemoryType, m.dstHost = p->dstHost, m.dstDevice = p->dstDevice, m.dstArray = p->dstArray;
    m.dstPitch = p->dstPitch, m.dstHeight = p->dstHeight;
    m.WidthInBytes = p->WidthInBytes, m.Height = p->Height, m.Depth = p->Depth;
    if (!async) return per_thread ? cuMemcpy3D_v2_ptds(&m) : cuMemcpy3D_v2(&m);
    return per_thread ? cuMemcpy3DAsync_v2_ptsz(&m, stream) : cuMemcpy3DAsync_v2(&m, stream);
  }
  auto src_dev = DeviceOf(p->srcContext);
  if (!src_dev.ok()) return FromStatus(src_dev.status(), call);
  auto dst_dev = DeviceOf(p->dstContext);
  if (!dst_dev.ok()) return FromStatus(dst_dev.status(), call);
  cudaMemcpy3DPeerParms r{};
  r.srcPtr = cudaPitchedPtr{P(p->srcDevice), p->srcPitch, p->WidthInBytes, p->srcHeight};
  r.srcPos = cudaPos{p->srcXInBytes, p->srcY, p->srcZ};
  r.srcDevice = *src_dev;
  r.dstPtr = cudaPitchedPtr{P(p->dstDevice), p->dstPitch, p->WidthInBytes, p->dstHeight};
  r.dstPos = cudaPos{p->dstXInBytes, p->dstY, p->dstZ};
  r.dstDevice = *dst_dev;
  r.extent = cudaExtent{p->WidthInBytes, p->Height, p->Depth};
  return ViaRuntime([&] {
    if (!async) return per_thread ? cudaMemcpy3DPeer_ptds(&r) : cudaMemcpy3DPeer(&r);
    return per_thread ? cudaMemcpy3DPeerAsync_ptsz(&r, S(stream)) : cudaMemcpy3DPeerAsync(&r, S(stream));
  });
}

}  // namespace

// ---- managed memory ----------------------------------------------------------------------------

REMORA_API CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  if (dptr == nullptr) return Invalid("cuMemAllocManaged", "dptr is NULL");
  void* p = nullptr;
  // CU_MEM_ATTACH_GLOBAL/HOST are cudaMemAttachGlobal/Host.
  CUresult r = InContext("cuMemAllocManaged", [&] { return cudaMallocManaged(&p, bytesize, flags); });
  if (r == CUDA_SUCCESS) {
    *dptr = reinterpret_cast<CUdeviceptr>(p);
    Process::Get().contexts().Own(*dptr, &Owned::allocations);
  }
  return r;
}

REMORA_API CUresult cuMemAdvise_v2(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUmemLocation location) {
  return ViaRuntime([&] { return cudaMemAdvise(P(devPtr), count, static_cast<cudaMemoryAdvise>(advice), Loc(location)); });
}
REMORA_API CUresult cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUdevice device) {
  return ViaRuntime([&] { return cudaMemAdvise(P(devPtr), count, static_cast<cudaMemoryAdvise>(advice), DeviceLoc(device)); });
}

REMORA_API CUresult cuMemPrefetchAsync_v2(CUdeviceptr devPtr, size_t count, CUmemLocation location, unsigned int flags,
                                          CUstream hStream) {
  return ViaRuntime([&] { return cudaMemPrefetchAsync(P(devPtr), count, Loc(location), flags, S(hStream)); });
}
REMORA_API CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr devPtr, size_t count, CUmemLocation location, unsigned int flags,
                                               CUstream hStream) {
  return ViaRuntime([&] { return cudaMemPrefetchAsync_ptsz(P(devPtr), count, Loc(location), flags, S(hStream)); });
}
REMORA_API CUresult cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count, CUdevice dstDevice, CUstream hStream) {
  return ViaRuntime([&] { return cudaMemPrefetchAsync(P(devPtr), count, DeviceLoc(dstDevice), 0, S(hStream)); });
}
REMORA_API CUresult cuMemPrefetchAsync_ptsz(CUdeviceptr devPtr, size_t count, CUdevice dstDevice, CUstream hStream) {
  return ViaRuntime([&] { return cudaMemPrefetchAsync_ptsz(P(devPtr), count, DeviceLoc(dstDevice), 0, S(hStream)); });
}

REMORA_API CUresult cuMemPrefetchBatchAsync(CUdeviceptr* dptrs, size_t* sizes, size_t count, CUmemLocation* prefetchLocs,
                                            size_t* prefetchLocIdxs, size_t numPrefetchLocs, unsigned long long flags,
                                            CUstream hStream) {
  return ViaRuntime([&] {
    return cudaMemPrefetchBatchAsync(reinterpret_cast<void**>(dptrs), sizes, count, reinterpret_cast<cudaMemLocation*>(prefetchLocs),
                                     prefetchLocIdxs, numPrefetchLocs, flags, S(hStream));
  });
}
REMORA_API CUresult cuMemPrefetchBatchAsync_ptsz(CUdeviceptr* dptrs, size_t* sizes, size_t count, CUmemLocation* prefetchLocs,
                                                 size_t* prefetchLocIdxs, size_t numPrefetchLocs, unsigned long long flags,
                                                 CUstream hStream) {
  return ViaRuntime([&] {
    return cudaMemPrefetchBatchAsync_ptsz(reinterpret_cast<void**>(dptrs), sizes, count,
                                          reinterpret_cast<cudaMemLocation*>(prefetchLocs), prefetchLocIdxs, numPrefetchLocs,
                                          flags, S(hStream));
  });
}
REMORA_API CUresult cuMemDiscardBatchAsync(CUdeviceptr* dptrs, size_t* sizes, size_t count, unsigned long long flags,
                                           CUstream hStream) {
  return ViaRuntime([&] { return cudaMemDiscardBatchAsync(reinterpret_cast<void**>(dptrs), sizes, count, flags, S(hStream)); });
}
REMORA_API CUresult cuMemDiscardBatchAsync_ptsz(CUdeviceptr* dptrs, size_t* sizes, size_t count, unsigned long long flags,
                                                CUstream hStream) {
  return ViaRuntime(
      [&] { return cudaMemDiscardBatchAsync_ptsz(reinterpret_cast<void**>(dptrs), sizes, count, flags, S(hStream)); });
}
REMORA_API CUresult cuMemDiscardAndPrefetchBatchAsync(CUdeviceptr* dptrs, size_t* sizes, size_t count,
                                                      CUmemLocation* prefetchLocs, size_t* prefetchLocIdxs,
                                                      size_t numPrefetchLocs, unsigned long long flags, CUstream hStream) {
  return ViaRuntime([&] {
    return cudaMemDiscardAndPrefetchBatchAsync(reinterpret_cast<void**>(dptrs), sizes, count,
                                               reinterpret_cast<cudaMemLocation*>(prefetchLocs), prefetchLocIdxs,
                                               numPrefetchLocs, flags, S(hStream));
  });
}
REMORA_API CUresult cuMemDiscardAndPrefetchBatchAsync_ptsz(CUdeviceptr* dptrs, size_t* sizes, size_t count,
                                                           CUmemLocation* prefetchLocs, size_t* prefetchLocIdxs,
                                                           size_t numPrefetchLocs, unsigned long long flags, CUstream hStream) {
  return ViaRuntime([&] {
    return cudaMemDiscardAndPrefetchBatchAsync_ptsz(reinterpret_cast<void**>(dptrs), sizes, count,
                                                    reinterpret_cast<cudaMemLocation*>(prefetchLocs), prefetchLocIdxs,
                                                    numPrefetchLocs, flags, S(hStream));
  });
}

REMORA_API CUresult cuMemRangeGetAttribute(void* data, size_t dataSize, CUmem_range_attribute attribute, CUdeviceptr devPtr,
                                           size_t count) {
  return ViaRuntime([&] {
    return cudaMemRangeGetAttribute(data, dataSize, static_cast<cudaMemRangeAttribute>(attribute), P(devPtr), count);
  });
}
REMORA_API CUresult cuMemRangeGetAttributes(void** data, size_t* dataSizes, CUmem_range_attribute* attributes,
                                            size_t numAttributes, CUdeviceptr devPtr, size_t count) {
  return ViaRuntime([&] {
    return cudaMemRangeGetAttributes(data, dataSizes, reinterpret_cast<cudaMemRangeAttribute*>(attributes), numAttributes,
                                     P(devPtr), count);
  });
}

// The attachment is checked, not sent: the host's copy is coherent at every synchronisation
// (managed.h), and the worker's memory is plain device memory the driver would refuse.
REMORA_API CUresult cuStreamAttachMemAsync(CUstream hStream, CUdeviceptr dptr, size_t length, unsigned int flags) {
  return ViaRuntime([&] { return cudaStreamAttachMemAsync(S(hStream), P(dptr), length, flags); });
}
REMORA_API CUresult cuStreamAttachMemAsync_ptsz(CUstream hStream, CUdeviceptr dptr, size_t length, unsigned int flags) {
  return ViaRuntime([&] { return cudaStreamAttachMemAsync_ptsz(S(hStream), P(dptr), length, flags); });
}

// ---- batched and peer copies -------------------------------------------------------------------

REMORA_API CUresult cuMemcpyBatchAsync_v2(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
                                          CUmemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs, CUstream hStream) {
  return ViaRuntime([&] {
    return cudaMemcpyBatchAsync(reinterpret_cast<void* const*>(dsts), reinterpret_cast<const void* const*>(srcs), sizes, count,
                                reinterpret_cast<cudaMemcpyAttributes*>(attrs), attrsIdxs, numAttrs, S(hStream));
  });
}
REMORA_API CUresult cuMemcpyBatchAsync_v2_ptsz(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
                                               CUmemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs, CUstream hStream) {
  return ViaRuntime([&] {
    return cudaMemcpyBatchAsync_ptsz(reinterpret_cast<void* const*>(dsts), reinterpret_cast<const void* const*>(srcs), sizes,
                                     count, reinterpret_cast<cudaMemcpyAttributes*>(attrs), attrsIdxs, numAttrs, S(hStream));
  });
}
// CUDA 12.8's form: failIdx is not known per copy (the batch is checked whole before any copy
// starts), so it is SIZE_MAX on an error.
REMORA_API CUresult cuMemcpyBatchAsync(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
                                       CUmemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs, size_t* failIdx,
                                       CUstream hStream) {
  CUresult r = cuMemcpyBatchAsync_v2(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, hStream);
  if (failIdx != nullptr) *failIdx = r == CUDA_SUCCESS ? 0 : std::numeric_limits<size_t>::max();
  return r;
}
REMORA_API CUresult cuMemcpyBatchAsync_ptsz(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
                                            CUmemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs, size_t* failIdx,
                                            CUstream hStream) {
  CUresult r = cuMemcpyBatchAsync_v2_ptsz(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, hStream);
  if (failIdx != nullptr) *failIdx = r == CUDA_SUCCESS ? 0 : std::numeric_limits<size_t>::max();
  return r;
}

REMORA_API CUresult cuMemcpy3DBatchAsync_v2(size_t numOps, CUDA_MEMCPY3D_BATCH_OP* opList, unsigned long long flags,
                                            CUstream hStream) {
  return ViaRuntime(
      [&] { return cudaMemcpy3DBatchAsync(numOps, reinterpret_cast<cudaMemcpy3DBatchOp*>(opList), flags, S(hStream)); });
}
REMORA_API CUresult cuMemcpy3DBatchAsync_v2_ptsz(size_t numOps, CUDA_MEMCPY3D_BATCH_OP* opList, unsigned long long flags,
                                                 CUstream hStream) {
  return ViaRuntime(
      [&] { return cudaMemcpy3DBatchAsync_ptsz(numOps, reinterpret_cast<cudaMemcpy3DBatchOp*>(opList), flags, S(hStream)); });
}
REMORA_API CUresult cuMemcpy3DBatchAsync(size_t numOps, CUDA_MEMCPY3D_BATCH_OP* opList, size_t* failIdx,
                                         unsigned long long flags, CUstream hStream) {
  CUresult r = cuMemcpy3DBatchAsync_v2(numOps, opList, flags, hStream);
  if (failIdx != nullptr) *failIdx = r == CUDA_SUCCESS ? 0 : std::numeric_limits<size_t>::max();
  return r;
}
REMORA_API CUresult cuMemcpy3DBatchAsync_ptsz(size_t numOps, CUDA_MEMCPY3D_BATCH_OP* opList, size_t* failIdx,
                                              unsigned long long flags, CUstream hStream) {
  CUresult r = cuMemcpy3DBatchAsync_v2_ptsz(numOps, opList, flags, hStream);
  if (failIdx != nullptr) *failIdx = r == CUDA_SUCCESS ? 0 : std::numeric_limits<size_t>::max();
  return r;
}

REMORA_API CUresult cuMemcpy3DPeer(const CUDA_MEMCPY3D_PEER* pCopy) {
  return Copy3DPeer(pCopy, nullptr, false, false, "cuMemcpy3DPeer");
}
REMORA_API CUresult cuMemcpy3DPeer_ptds(const CUDA_MEMCPY3D_PEER* pCopy) {
  return Copy3DPeer(pCopy, nullptr, true, false, "cuMemcpy3DPeer");
}
REMORA_API CUresult cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER* pCopy, CUstream hStream) {
  return Copy3DPeer(pCopy, hStream, false, true, "cuMemcpy3DPeerAsync");
}
REMORA_API CUresult cuMemcpy3DPeerAsync_ptsz(const CUDA_MEMCPY3D_PEER* pCopy, CUstream hStream) {
  return Copy3DPeer(pCopy, hStream, true, true, "cuMemcpy3DPeerAsync");
}
