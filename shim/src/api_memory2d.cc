// Pitched and 3D memory (copies with a CUDA array side: api_array_copy.cc), strided copies
// and memsets, and copies between devices. A strided copy travels as one request: host
// rows are packed back to back on the wire.
#include <cuda_runtime_api.h>

#include <cstring>
#include <vector>

#include "arrays.h"
#include "callbacks.h"
#include "cuda_client.h"
#include "device_core.h"
#include "export.h"
#include "memops.h"
#include "multi_server.h"
#include "runtime.h"
#include "streams.h"
#include "wire_args.h"

namespace remora::shim {
namespace {

// A strided region: `depth` slices of `height` rows of `width` bytes; rows `pitch` apart,
// slices `rows` rows apart.
struct Region {
  char* base;
  size_t pitch, rows;
  char* Row(size_t y, size_t z) const { return base + (z * rows + y) * pitch; }
  bool Packed(size_t width, size_t height, size_t depth) const {
    return pitch == width && (depth == 1 || rows == height);
  }
};

uint64_t Extent(const Region& r, size_t width, size_t height, size_t depth) {
  return ((depth - 1) * r.rows + (height - 1)) * r.pitch + width;
}

void Pack(const Region& r, size_t width, size_t height, size_t depth, char* out) {
  for (size_t z = 0; z < depth; z++)
    for (size_t y = 0; y < height; y++, out += width) std::memcpy(out, r.Row(y, z), width);
}

void Unpack(const char* in, size_t width, size_t height, size_t depth, const Region& r) {
  for (size_t z = 0; z < depth; z++)
    for (size_t y = 0; y < height; y++, in += width) std::memcpy(r.Row(y, z), in, width);
}

Status Copy3D(Region dst, Region src, size_t width, size_t height, size_t depth, cudaMemcpyKind kind, cudaStream_t stream,
              bool per_thread, bool async) {
  Runtime& rt = Runtime::Get();
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault)
    return Error(Err::kInvalidMemcpyDirection, "invalid cudaMemcpyKind {}", static_cast<int>(kind));
  ASSIGN_OR_RETURN(Client * cl, rt.Session());
  int device = 0;
  Status st = rt.CheckStream(stream, &device);
  if (!st.ok()) return st;
  if (width == 0 || height == 0 || depth == 0) return Status::Ok();
  if ((height > 1 || depth > 1) && (dst.pitch < width || src.pitch < width))
    return Error(Err::kInvalidPitchValue, "a pitch is smaller than the width {}", width);
  Side from = Classify(src.base), to = Classify(dst.base);  // cudaMemcpyDefault; explicit kinds decide
  if (kind == cudaMemcpyHostToDevice || kind == cudaMemcpyHostToHost) from = Side::kHost;
  if (kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice) from = Side::kDevice;
  if (kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyHostToHost) to = Side::kHost;
  if (kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice) to = Side::kDevice;
  if (rt.managed().Contains(U(src.base))) from = Side::kDevice;  // managed memory is device memory
  if (rt.managed().Contains(U(dst.base))) to = Side::kDevice;
  if (from == Side::kDevice) st = rt.CheckDeviceRange(U(src.base), Extent(src, width, height, depth));
  if (st.ok() && to == Side::kDevice) st = rt.CheckDeviceRange(U(dst.base), Extent(dst, width, height, depth));
  if (st.ok() && (from == Side::kDevice || to == Side::kDevice)) st = rt.managed().BeforeDeviceWork();
  if (!st.ok()) return st;
  size_t total = width * height * depth;

  if (from == Side::kHost && to == Side::kHost) {
    for (size_t z = 0; z < depth; z++)
      for (size_t y = 0; y < height; y++) std::memmove(dst.Row(y, z), src.Row(y, z), width);
    return Status::Ok();
  }
  auto build = [&](wire::Copy3D::Kind k, bool is_async) {
    return [&, k, is_async](wire::Request::Builder& r) {
      auto m = r.initCopy3D();
      m.setDst(U(dst.base));
      m.setDstPitch(dst.pitch);
      m.setDstHeight(dst.rows);
      m.setSrc(U(src.base));
      m.setSrcPitch(src.pitch);
      m.setSrcHeight(src.rows);
      m.setWidth(width);
      m.setHeight(height);
      m.setDepth(depth);
      m.setKind(k);
      SetStream(m.initStream(), stream, per_thread);
      m.setAsync(is_async);
    };
  };
  if (from == Side::kHost) {
    // Read now: right for an asynchronous copy from pageable memory; otherwise host functions
    // queued before the copy run first (they may write the source).
    if (!async || Runtime::Get().FindHost(src.base)) HostCallbacks::Get().WaitForRegistered();
    std::vector<char> packed;
    const char* data = src.base;
    if (!src.Packed(width, height, depth)) {
      packed.resize(total);
      Pack(src, width, height, depth, packed.data());
      data = packed.data();
    }
    if (async) return cl->Post(device, build(wire::Copy3D::Kind::HOST_TO_DEVICE, true), AsBytes(data, total));
    st = cl->Call(device, build(wire::Copy3D::Kind::HOST_TO_DEVICE, false), [](wire::Reply::Reader&) { return Status::Ok(); },
                  AsBytes(data, total));
    return AfterSync(cl, st);
  }
  if (to == Side::kHost) {
    // Returns when the data is in place (into pinned or pageable memory alike).
    std::vector<char> packed;
    char* out = dst.base;
    if (!dst.Packed(width, height, depth)) {
      packed.resize(total);
      out = packed.data();
    }
    st = cl->Call(device, build(wire::Copy3D::Kind::DEVICE_TO_HOST, false), [](wire::Reply::Reader&) { return Status::Ok(); },
                  {}, AsWritableBytes(out, total));
    if (st.ok() && !packed.empty()) Unpack(packed.data(), width, height, depth, dst);
    return async ? st : AfterSync(cl, st);
  }
  return cl->Post(device, build(wire::Copy3D::Kind::DEVICE_TO_DEVICE, true));
}

cudaError_t Copy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                   cudaMemcpyKind kind, cudaStream_t stream, bool per_thread, bool async, const char* call) {
  return Finish(Copy3D(Region{static_cast<char*>(dst), dpitch, height},
                       Region{const_cast<char*>(static_cast<const char*>(src)), spitch, height}, width, height, 1, kind, stream,
                       per_thread, async),
                call);
}

cudaError_t Copy3DParms(const cudaMemcpy3DParms* p, cudaStream_t stream, bool per_thread, bool async, const char* call) {
  if (p == nullptr) return Finish(Error(Err::kInvalidValue, "p is NULL"), call);
  if (p->srcArray != nullptr || p->dstArray != nullptr) return ArrayCopy3DParms(p, stream, per_thread, async, call);
  auto region = [](const cudaPitchedPtr& pp, const cudaPos& pos) {
    char* base = static_cast<char*>(pp.ptr) + (pos.z * pp.ysize + pos.y) * pp.pitch + pos.x;
    return Region{base, pp.pitch, pp.ysize};
  };
  return Finish(Copy3D(region(p->dstPtr, p->dstPos), region(p->srcPtr, p->srcPos), p->extent.width, p->extent.height,
                       p->extent.depth, p->kind, stream, per_thread, async),
                call);
}

}  // namespace

Status CopyStridedMemory(void* dst, size_t dpitch, size_t drows, const void* src, size_t spitch, size_t srows, size_t width,
                         size_t height, size_t depth, cudaMemcpyKind kind, cudaStream_t stream, bool per_thread, bool async) {
  return Copy3D(Region{static_cast<char*>(dst), dpitch, drows}, Region{const_cast<char*>(static_cast<const char*>(src)), spitch, srows},
                width, height, depth, kind, stream, per_thread, async);
}

cudaError_t CopyStrided(void* dst, size_t dpitch, size_t drows, const void* src, size_t spitch, size_t srows,
                        size_t width, size_t height, size_t depth, cudaMemcpyKind kind, cudaStream_t stream,
                        bool per_thread, bool async, const char* call) {
  return Finish(CopyStridedMemory(dst, dpitch, drows, src, spitch, srows, width, height, depth, kind, stream, per_thread, async),
                call);
}

namespace {

cudaError_t Memset3D(char* dst, size_t pitch, size_t rows, int value, size_t width, size_t height, size_t depth,
                     cudaStream_t stream, bool per_thread, const char* call) {
  Runtime& rt = Runtime::Get();
  auto c = rt.Session();
  if (!c.ok()) return Finish(c.status(), call);
  int device = 0;
  Status st = rt.CheckStream(stream, &device);
  if (!st.ok()) return Finish(st, call);
  if (width == 0 || height == 0 || depth == 0) return cudaSuccess;
  if ((height > 1 || depth > 1) && pitch < width) return Finish(Error(Err::kInvalidPitchValue, "pitch < width"), call);
  st = rt.CheckDeviceRange(U(dst), ((depth - 1) * rows + (height - 1)) * pitch + width);
  if (st.ok()) st = rt.managed().BeforeDeviceWork();
  if (!st.ok()) return Finish(st, call);
  st = (*c)->Post(device, [&](wire::Request::Builder& r) {
    auto m = r.initMemset3D();
    m.setDst(U(dst));
    m.setPitch(pitch);
    m.setRowsPerSlice(rows);
    m.setValue(static_cast<uint8_t>(value));
    m.setWidth(width);
    m.setHeight(height);
    m.setDepth(depth);
    SetStream(m.initStream(), stream, per_thread);
    m.setAsync(true);
  });
  return Finish(st, call);
}

// cudaMallocPitch: the driver's pitched allocation with CUDA's widest element (the runtime
// has no element size; the pitch does not depend on it).
Result<std::pair<uint64_t, uint64_t>> MallocPitch(size_t width, size_t height) {
  CUdeviceptr p = 0;
  size_t pitch = 0;
  RETURN_IF_ERROR(gen::cuda::cuMemAllocPitch_v2(CallCtx{false, "cudaMallocPitch"}, &p, &pitch, width, height, 16));
  return std::make_pair(static_cast<uint64_t>(p), static_cast<uint64_t>(pitch));
}

}  // namespace

Status CopyPeerMemory(void* dst, int dst_device, const void* src, int src_device, size_t count, cudaStream_t stream,
                      const char* call) {
  Runtime& rt = Runtime::Get();
  RETURN_IF_ERROR(rt.Session().status());
  int device = 0;
  Status st = rt.CheckStream(stream, &device);
  if (!st.ok()) return st;
  if (count == 0) return Status::Ok();
  auto d = rt.FindDevice(U(dst));
  auto s = rt.FindDevice(U(src));
  if (!d || d->device != dst_device || !s || s->device != src_device)
    return Error(Err::kInvalidValue, "a pointer is not device memory of the device given with it");
  st = rt.CheckDeviceRange(U(dst), count);
  if (st.ok()) st = rt.CheckDeviceRange(U(src), count);
  if (st.ok()) st = rt.managed().BeforeDeviceWork();
  if (!st.ok()) return st;
  // Devices of two servers: staged through this process (multi_server.h).
  if (!rt.SameServer(src_device, dst_device))
    return CrossServerCopy(U(dst), dst_device, U(src), src_device, count, stream, false);
  // A default stream is then the devices' server's (RemoteCall::Stream); another must be.
  if (rt.server_count() > 1 && !IsDefaultStream(stream) && !rt.SameServer(device, dst_device))
    return Error(Err::kInvalidValue, "a stream of device {} cannot copy between devices {} and {} of another "
                 "Remora server", device, src_device, dst_device);
  // Asynchronous with respect to the host, synchronous form or not, as in CUDA.
  return gen::cuda::remoraMemcpyPeerAsync(CallCtx{false, call}, reinterpret_cast<CUstream>(stream), U(dst), dst_device, U(src),
                                          src_device, count);
}

cudaError_t MemcpyPeer(void* dst, int dst_device, const void* src, int src_device, size_t count, cudaStream_t stream,
                       bool, const char* call) {
  return Finish(CopyPeerMemory(dst, dst_device, src, src_device, count, stream, call), call);
}

Status SetPeerAccess(int peer, bool enable, const char* call) {
  Runtime& rt = Runtime::Get();
  RETURN_IF_ERROR(rt.Session().status());
  int device = Thread().device;
  if (!rt.SameServer(device, peer)) {
    // No path joins two servers' GPUs: never peers (copies between them are staged).
    RETURN_IF_ERROR(rt.Device(peer).status());
    return Error(enable ? Err::kInvalidDevice : Err::kPeerAccessNotEnabled,
                 "devices {} and {} are on two Remora servers: no peer access", device, peer);
  }
  return gen::cuda::remoraPeerAccess(CallCtx{false, call}, device, peer, enable ? 1 : 0);
}

}  // namespace remora::shim

namespace remora::gen::cuda {

void PitchAllocated(CUdeviceptr* dptr, size_t* pitch, size_t, size_t height, unsigned int) {
  shim::Runtime& rt = shim::Runtime::Get();
  auto device = rt.CurrentDevice();  // the call's: no argument named another
  if (*dptr != 0) rt.AddDeviceAllocation(*dptr, *pitch * height, device.ok() ? *device : 0);
}

}  // namespace remora::gen::cuda

using namespace remora;
using namespace remora::shim;

REMORA_API cudaError_t cudaMallocPitch(void** devPtr, size_t* pitch, size_t width, size_t height) {
  if (devPtr == nullptr || pitch == nullptr) return Finish(Error(Err::kInvalidValue, "NULL argument"), "cudaMallocPitch");
  auto p = MallocPitch(width, height);
  if (!p.ok()) return Finish(p.status(), "cudaMallocPitch");
  *devPtr = reinterpret_cast<void*>(p->first);
  *pitch = p->second;
  return cudaSuccess;
}

REMORA_API cudaError_t cudaMalloc3D(cudaPitchedPtr* pitchedDevPtr, cudaExtent extent) {
  if (pitchedDevPtr == nullptr) return Finish(Error(Err::kInvalidValue, "pitchedDevPtr is NULL"), "cudaMalloc3D");
  auto p = MallocPitch(extent.width, extent.height * extent.depth);
  if (!p.ok()) return Finish(p.status(), "cudaMalloc3D");
  *pitchedDevPtr = cudaPitchedPtr{reinterpret_cast<void*>(p->first), p->second, extent.width, extent.height};
  return cudaSuccess;
}

REMORA_API cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                                    cudaMemcpyKind kind) {
  return Copy2D(dst, dpitch, src, spitch, width, height, kind, nullptr, false, false, "cudaMemcpy2D");
}
REMORA_API cudaError_t cudaMemcpy2D_ptds(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                         size_t height, cudaMemcpyKind kind) {
  return Copy2D(dst, dpitch, src, spitch, width, height, kind, nullptr, true, false, "cudaMemcpy2D");
}
REMORA_API cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                         size_t height, cudaMemcpyKind kind, cudaStream_t stream) {
  return Copy2D(dst, dpitch, src, spitch, width, height, kind, stream, false, true, "cudaMemcpy2DAsync");
}
REMORA_API cudaError_t cudaMemcpy2DAsync_ptsz(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                              size_t height, cudaMemcpyKind kind, cudaStream_t stream) {
  return Copy2D(dst, dpitch, src, spitch, width, height, kind, stream, true, true, "cudaMemcpy2DAsync");
}
REMORA_API cudaError_t cudaMemcpy3D(const cudaMemcpy3DParms* p) { return Copy3DParms(p, nullptr, false, false, "cudaMemcpy3D"); }
REMORA_API cudaError_t cudaMemcpy3D_ptds(const cudaMemcpy3DParms* p) { return Copy3DParms(p, nullptr, true, false, "cudaMemcpy3D"); }
REMORA_API cudaError_t cudaMemcpy3DAsync(const cudaMemcpy3DParms* p, cudaStream_t stream) {
  return Copy3DParms(p, stream, false, true, "cudaMemcpy3DAsync");
}
REMORA_API cudaError_t cudaMemcpy3DAsync_ptsz(const cudaMemcpy3DParms* p, cudaStream_t stream) {
  return Copy3DParms(p, stream, true, true, "cudaMemcpy3DAsync");
}

REMORA_API cudaError_t cudaMemset2D(void* devPtr, size_t pitch, int value, size_t width, size_t height) {
  return Memset3D(static_cast<char*>(devPtr), pitch, height, value, width, height, 1, nullptr, false, "cudaMemset2D");
}
REMORA_API cudaError_t cudaMemset2D_ptds(void* devPtr, size_t pitch, int value, size_t width, size_t height) {
  return Memset3D(static_cast<char*>(devPtr), pitch, height, value, width, height, 1, nullptr, true, "cudaMemset2D");
}
REMORA_API cudaError_t cudaMemset2DAsync(void* devPtr, size_t pitch, int value, size_t width, size_t height,
                                         cudaStream_t stream) {
  return Memset3D(static_cast<char*>(devPtr), pitch, height, value, width, height, 1, stream, false, "cudaMemset2DAsync");
}
REMORA_API cudaError_t cudaMemset2DAsync_ptsz(void* devPtr, size_t pitch, int value, size_t width, size_t height,
                                              cudaStream_t stream) {
  return Memset3D(static_cast<char*>(devPtr), pitch, height, value, width, height, 1, stream, true, "cudaMemset2DAsync");
}
REMORA_API cudaError_t cudaMemset3D(cudaPitchedPtr p, int value, cudaExtent e) {
  return Memset3D(static_cast<char*>(p.ptr), p.pitch, p.ysize, value, e.width, e.height, e.depth, nullptr, false, "cudaMemset3D");
}
REMORA_API cudaError_t cudaMemset3D_ptds(cudaPitchedPtr p, int value, cudaExtent e) {
  return Memset3D(static_cast<char*>(p.ptr), p.pitch, p.ysize, value, e.width, e.height, e.depth, nullptr, true, "cudaMemset3D");
}
REMORA_API cudaError_t cudaMemset3DAsync(cudaPitchedPtr p, int value, cudaExtent e, cudaStream_t stream) {
  return Memset3D(static_cast<char*>(p.ptr), p.pitch, p.ysize, value, e.width, e.height, e.depth, stream, false, "cudaMemset3DAsync");
}
REMORA_API cudaError_t cudaMemset3DAsync_ptsz(cudaPitchedPtr p, int value, cudaExtent e, cudaStream_t stream) {
  return Memset3D(static_cast<char*>(p.ptr), p.pitch, p.ysize, value, e.width, e.height, e.depth, stream, true, "cudaMemset3DAsync");
}

REMORA_API cudaError_t cudaMemcpyPeer(void* dst, int dstDevice, const void* src, int srcDevice, size_t count) {
  return MemcpyPeer(dst, dstDevice, src, srcDevice, count, nullptr, false, "cudaMemcpyPeer");
}
REMORA_API cudaError_t cudaMemcpyPeerAsync(void* dst, int dstDevice, const void* src, int srcDevice, size_t count,
                                           cudaStream_t stream) {
  return MemcpyPeer(dst, dstDevice, src, srcDevice, count, stream, true, "cudaMemcpyPeerAsync");
}

REMORA_API cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags) {
  if (flags != 0) return Finish(Error(Err::kInvalidValue, "flags must be 0"), "cudaDeviceEnablePeerAccess");
  return Finish(SetPeerAccess(peerDevice, true, "cudaDeviceEnablePeerAccess"), "cudaDeviceEnablePeerAccess");
}
REMORA_API cudaError_t cudaDeviceDisablePeerAccess(int peerDevice) {
  return Finish(SetPeerAccess(peerDevice, false, "cudaDeviceDisablePeerAccess"), "cudaDeviceDisablePeerAccess");
}
