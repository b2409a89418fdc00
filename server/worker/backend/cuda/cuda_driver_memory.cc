// The real backend (cuda_driver.h): 2D/3D copies and memsets, stream-ordered allocation and
// pools, peers, limits and CUDA IPC.

#include <cstring>

#include "worker/backend/cuda/cuda_driver.h"

namespace remora::worker::cuda_backend {

Result<std::pair<DevPtr, size_t>> CudaDriver::MemAllocPitch(size_t width, size_t height) {
  CUdeviceptr p = 0;
  size_t pitch = 0;
  RETURN_IF_ERROR(Check(api_.cuMemAllocPitch(&p, &pitch, width, height, 16), "cuMemAllocPitch"));
  return std::make_pair(static_cast<DevPtr>(p), pitch);
}

Status CudaDriver::Copy3D(const CopySide& dst, const CopySide& src, uint64_t width, uint64_t height, uint64_t depth, DStream s) {
  CUDA_MEMCPY3D c = {};
  c.srcMemoryType = src.array ? CU_MEMORYTYPE_ARRAY : src.host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
  if (src.array) {
    c.srcArray = static_cast<CUarray>(src.array);
    c.srcXInBytes = src.x;
    c.srcY = src.y;
    c.srcZ = src.z;
  } else if (src.host) {
    c.srcHost = reinterpret_cast<const void*>(src.addr);
  } else {
    c.srcDevice = src.addr;
  }
  if (!src.array) {
    c.srcPitch = src.pitch;
    c.srcHeight = src.height;
  }
  c.dstMemoryType = dst.array ? CU_MEMORYTYPE_ARRAY : dst.host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
  if (dst.array) {
    c.dstArray = static_cast<CUarray>(dst.array);
    c.dstXInBytes = dst.x;
    c.dstY = dst.y;
    c.dstZ = dst.z;
  } else if (dst.host) {
    c.dstHost = reinterpret_cast<void*>(dst.addr);
  } else {
    c.dstDevice = dst.addr;
  }
  if (!dst.array) {
    c.dstPitch = dst.pitch;
    c.dstHeight = dst.height;
  }
  c.WidthInBytes = width;
  c.Height = height;
  c.Depth = depth;
  return Check(api_.cuMemcpy3DAsync(&c, static_cast<CUstream>(s)), "cuMemcpy3DAsync");
}

Status CudaDriver::Memset2D8(DevPtr dst, size_t pitch, uint8_t value, size_t width, size_t height, DStream s) {
  return Check(api_.cuMemsetD2D8Async(dst, pitch, value, width, height, static_cast<CUstream>(s)), "cuMemsetD2D8Async");
}

Result<DevPtr> CudaDriver::MemAllocAsync(size_t bytes, DPool pool, DStream s) {
  CUdeviceptr p = 0;
  if (pool == nullptr) RETURN_IF_ERROR(Check(api_.cuMemAllocAsync(&p, bytes, static_cast<CUstream>(s)), "cuMemAllocAsync"));
  else RETURN_IF_ERROR(Check(api_.cuMemAllocFromPoolAsync(&p, bytes, static_cast<CUmemoryPool>(pool), static_cast<CUstream>(s)), "cuMemAllocFromPoolAsync"));
  return static_cast<DevPtr>(p);
}

Result<DPool> CudaDriver::DefaultMemPool(int device) {
  CUmemoryPool p = nullptr;
  RETURN_IF_ERROR(Check(api_.cuDeviceGetDefaultMemPool(&p, device), "cuDeviceGetDefaultMemPool"));
  return static_cast<DPool>(p);
}

Result<DPool> CudaDriver::GetMemPool(int device) {
  CUmemoryPool p = nullptr;
  RETURN_IF_ERROR(Check(api_.cuDeviceGetMemPool(&p, device), "cuDeviceGetMemPool"));
  return static_cast<DPool>(p);
}

Status CudaDriver::SetMemPool(int device, DPool pool) {
  return Check(api_.cuDeviceSetMemPool(device, static_cast<CUmemoryPool>(pool)), "cuDeviceSetMemPool");
}

Result<DPool> CudaDriver::MemPoolCreate(int device, uint64_t max_size, unsigned handle_types) {
  CUmemPoolProps props = {};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.handleTypes = static_cast<CUmemAllocationHandleType>(handle_types);
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = device;
  props.maxSize = max_size;
  CUmemoryPool p = nullptr;
  RETURN_IF_ERROR(Check(api_.cuMemPoolCreate(&p, &props), "cuMemPoolCreate"));
  return static_cast<DPool>(p);
}

bool CudaDriver::IntPoolAttribute(int a) {
  return a == CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES || a == CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC ||
         a == CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES;
}

Status CudaDriver::MemPoolSetAttribute(DPool pool, int a, uint64_t value) {
  int iv = static_cast<int>(value);
  cuuint64_t uv = value;
  void* v = IntPoolAttribute(a) ? static_cast<void*>(&iv) : static_cast<void*>(&uv);
  return Check(api_.cuMemPoolSetAttribute(static_cast<CUmemoryPool>(pool), static_cast<CUmemPool_attribute>(a), v), "cuMemPoolSetAttribute");
}

Result<uint64_t> CudaDriver::MemPoolGetAttribute(DPool pool, int a) {
  int iv = 0;
  cuuint64_t uv = 0;
  void* v = IntPoolAttribute(a) ? static_cast<void*>(&iv) : static_cast<void*>(&uv);
  RETURN_IF_ERROR(Check(api_.cuMemPoolGetAttribute(static_cast<CUmemoryPool>(pool), static_cast<CUmemPool_attribute>(a), v), "cuMemPoolGetAttribute"));
  return IntPoolAttribute(a) ? static_cast<uint64_t>(iv) : uv;
}

Status CudaDriver::MemPoolTrimTo(DPool pool, size_t keep) {
  return Check(api_.cuMemPoolTrimTo(static_cast<CUmemoryPool>(pool), keep), "cuMemPoolTrimTo");
}

Status CudaDriver::MemcpyPeer(DevPtr dst, int dst_device, DevPtr src, int src_device, size_t n, DStream s) {
  int cur = current_;  // both contexts must exist; the caller's current device stays current
  RETURN_IF_ERROR(SetDevice(dst_device));
  RETURN_IF_ERROR(SetDevice(src_device));
  RETURN_IF_ERROR(SetDevice(cur));
  CUcontext dctx = contexts_[static_cast<size_t>(dst_device)], sctx = contexts_[static_cast<size_t>(src_device)];
  return Check(api_.cuMemcpyPeerAsync(dst, dctx, src, sctx, n, static_cast<CUstream>(s)), "cuMemcpyPeerAsync");
}

Result<bool> CudaDriver::CanAccessPeer(int device, int peer) {
  int can = 0;
  RETURN_IF_ERROR(Check(api_.cuDeviceCanAccessPeer(&can, device, peer), "cuDeviceCanAccessPeer"));
  return can != 0;
}

Status CudaDriver::EnablePeerAccess(int peer) {
  int cur = current_;
  RETURN_IF_ERROR(SetDevice(peer));
  RETURN_IF_ERROR(SetDevice(cur));
  return Check(api_.cuCtxEnablePeerAccess(contexts_[static_cast<size_t>(peer)], 0), "cuCtxEnablePeerAccess");
}

Status CudaDriver::DisablePeerAccess(int peer) {
  int cur = current_;
  RETURN_IF_ERROR(SetDevice(peer));
  RETURN_IF_ERROR(SetDevice(cur));
  return Check(api_.cuCtxDisablePeerAccess(contexts_[static_cast<size_t>(peer)]), "cuCtxDisablePeerAccess");
}

Result<uint64_t> CudaDriver::GetLimit(int limit) {
  size_t v = 0;
  RETURN_IF_ERROR(Check(api_.cuCtxGetLimit(&v, static_cast<CUlimit>(limit)), "cuCtxGetLimit"));
  return static_cast<uint64_t>(v);
}

Status CudaDriver::SetLimit(int limit, uint64_t value) {
  return Check(api_.cuCtxSetLimit(static_cast<CUlimit>(limit), value), "cuCtxSetLimit");
}

Result<std::pair<int, int>> CudaDriver::StreamPriorityRange() {
  int least = 0, greatest = 0;
  RETURN_IF_ERROR(Check(api_.cuCtxGetStreamPriorityRange(&least, &greatest), "cuCtxGetStreamPriorityRange"));
  return std::make_pair(least, greatest);
}

}  // namespace remora::worker::cuda_backend
