// The encoding of graph node parameters for the worker (protocol/api/cuda_graph_wire.h):
// what only the client knows - a kernel's parameter layout, whether host memory is shared
// with the worker, the functions of host nodes - resolved as the parameters are written.
// Used by the graph entry points of graph_client.cc.
#include "graph_params.h"

#include <cstdio>
#include <cstring>
#include <vector>

#include "callbacks.h"
#include "cuda_client.h"
#include "cuda_graph_wire.h"
#include "driver/objects.h"
#include "managed.h"
#include "process.h"
#include "registry.h"
#include "runtime.h"
#include "wire_args.h"

namespace remora::shim {

using api::cuda::WireBinding;
using api::cuda::WireCopy3D;
using api::cuda::WireCopySide;
using api::cuda::WireKernel;
using api::cuda::WireSideKind;

// The parameter layout of the worker's function `handle`: a kernel the runtime loaded, or a
// function of a module the driver API loaded (cuModuleGetFunction); nullptr if neither.
const KernelInfo* LayoutOf(uint64_t handle) {
  if (const KernelInfo* k = Registry::Get().KernelByHandle(handle).second) return k;
  auto f = Process::Get().driver_objects().Function(reinterpret_cast<CUfunction>(handle));
  return f.ok() ? f->kernel : nullptr;
}

namespace {

Status BadValue(RemoteCall& c, const char* what) { return c.Fail(CUDA_ERROR_INVALID_VALUE, what); }

// Bytes of a strided host side: depth slices of height rows of width bytes.
uint64_t Span(uint64_t pitch, uint64_t rows, uint64_t width, uint64_t height, uint64_t depth) {
  return ((depth - 1) * rows + (height - 1)) * pitch + width;
}

Status EncodeSide(RemoteCall& c, bool src, const CUDA_MEMCPY3D& m, WireCopySide* w) {
  CUmemorytype type = src ? m.srcMemoryType : m.dstMemoryType;
  const void* host = src ? m.srcHost : m.dstHost;
  CUdeviceptr dev = src ? m.srcDevice : m.dstDevice;
  uint64_t x = src ? m.srcXInBytes : m.dstXInBytes, y = src ? m.srcY : m.dstY, z = src ? m.srcZ : m.dstZ;
  uint64_t pitch = src ? m.srcPitch : m.dstPitch, height = src ? m.srcHeight : m.dstHeight;
  *w = WireCopySide{};
  w->x_bytes = x;
  w->y = y;
  w->z = z;
  w->pitch = pitch;
  w->height = height;
  Runtime& rt = Runtime::Get();
  if (type == CU_MEMORYTYPE_UNIFIED) {
    // A unified address: the client's tables say which it is.
    if (rt.FindDevice(dev)) {
      type = CU_MEMORYTYPE_DEVICE;
    } else {
      type = CU_MEMORYTYPE_HOST;
      host = reinterpret_cast<const void*>(dev);
    }
  }
  switch (type) {
    case CU_MEMORYTYPE_DEVICE:
      w->kind = WireSideKind::kDevice;
      w->address = dev;
      return Status::Ok();
    case CU_MEMORYTYPE_ARRAY:
      w->kind = WireSideKind::kArray;
      w->array = reinterpret_cast<uint64_t>(src ? m.srcArray : m.dstArray);
      return Status::Ok();
    case CU_MEMORYTYPE_HOST: {
      if (host == nullptr) return BadValue(c, "a host side of the copy is NULL");
      uint64_t p = pitch ? pitch : m.WidthInBytes, rows = height ? height : m.Height;
      auto start = reinterpret_cast<uint64_t>(host) + (z * rows + y) * p + x;
      uint64_t span = Span(p, rows, m.WidthInBytes, m.Height, m.Depth);
      w->pitch = p;
      w->height = rows;
      w->x_bytes = w->y = w->z = 0;
      auto a = rt.FindHost(reinterpret_cast<const void*>(start));
      uint64_t region = a ? (a->cookie >> 32) : 0;
      if (region != 0 && start + span <= a->base + a->size) {
        // Shared with the worker: the graph reads and writes this memory itself.
        w->kind = WireSideKind::kRegion;
        w->region = region;
        w->address = start - a->base;
        w->span = span;
        return Status::Ok();
      }
      bool contiguous = (m.Height == 1 && m.Depth == 1) || (p == m.WidthInBytes && (m.Depth == 1 || rows == m.Height));
      if (!contiguous)
        return c.Fail(CUDA_ERROR_NOT_SUPPORTED,
                      "a graph copy with strided host memory is supported only for pinned memory shared with the "
                      "server (cudaHostAlloc over shm)");
      w->kind = WireSideKind::kHost;
      w->address = start;
      w->span = span;
      return Status::Ok();
    }
    default:
      return BadValue(c, "an unknown memory type in a copy");
  }
}

// A kernel's packed parameters: from kernelParams (the layout the worker reported), or the
// buffer of `extra` (CU_LAUNCH_PARAM_BUFFER_POINTER).
Status PackKernel(RemoteCall& c, const CUDA_KERNEL_NODE_PARAMS_v3& k, std::vector<std::byte>* out) {
  const KernelInfo* info = LayoutOf(reinterpret_cast<uint64_t>(k.func));
  if (k.extra != nullptr) {
    const void* buffer = nullptr;
    size_t size = 0;
    for (void** e = k.extra; *e != CU_LAUNCH_PARAM_END; e += 2) {
      if (*e == CU_LAUNCH_PARAM_BUFFER_POINTER) buffer = e[1];
      else if (*e == CU_LAUNCH_PARAM_BUFFER_SIZE) size = *static_cast<size_t*>(e[1]);
      else return BadValue(c, "an unknown entry in the kernel's extra options");
    }
    if (buffer == nullptr) return BadValue(c, "extra options without a parameter buffer");
    out->assign(static_cast<const std::byte*>(buffer), static_cast<const std::byte*>(buffer) + size);
    return WakePinned(out->data(), out->size());  // pinned memory a node is handed (managed.h)
  }
  if (info == nullptr) return c.Fail(CUDA_ERROR_INVALID_HANDLE, "the node's kernel is not one this process has used");
  out->assign(info->param_bytes, std::byte{0});
  if (!info->params.empty() && k.kernelParams == nullptr) return BadValue(c, "the kernel takes parameters but kernelParams is NULL");
  for (size_t i = 0; i < info->params.size(); i++)
    std::memcpy(out->data() + info->params[i].first, k.kernelParams[i], info->params[i].second);
  return WakePinned(out->data(), out->size());  // pinned memory a node is handed (managed.h)
}

}  // namespace

Status EncodeNodeParams(RemoteCall& c, const CUgraphNodeParams& p, uint64_t* host_id) {
  c.Put<uint32_t>(static_cast<uint32_t>(p.type));
  switch (p.type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
      WireKernel k{};
      k.function = reinterpret_cast<uint64_t>(p.kernel.func);
      if (k.function == 0) return c.Fail(CUDA_ERROR_NOT_SUPPORTED, "kernel nodes of library kernels (CUkernel) are not supported by Remora yet");
      k.grid[0] = p.kernel.gridDimX;
      k.grid[1] = p.kernel.gridDimY;
      k.grid[2] = p.kernel.gridDimZ;
      k.block[0] = p.kernel.blockDimX;
      k.block[1] = p.kernel.blockDimY;
      k.block[2] = p.kernel.blockDimZ;
      k.shared_mem = p.kernel.sharedMemBytes;
      std::vector<std::byte> args;
      RETURN_IF_ERROR(PackKernel(c, p.kernel, &args));
      c.Put(k);
      c.PutArray(args.data(), args.size(), 1);
      return Status::Ok();
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY: {
      const CUDA_MEMCPY3D& m = p.memcpy.copyParams;
      WireCopy3D w{};
      w.width_bytes = m.WidthInBytes;
      w.height = m.Height == 0 ? 1 : m.Height;
      w.depth = m.Depth == 0 ? 1 : m.Depth;
      CUDA_MEMCPY3D norm = m;
      norm.Height = w.height;
      norm.Depth = w.depth;
      RETURN_IF_ERROR(EncodeSide(c, true, norm, &w.src));
      RETURN_IF_ERROR(EncodeSide(c, false, norm, &w.dst));
      c.Put(w);
      return Status::Ok();
    }
    case CU_GRAPH_NODE_TYPE_MEMSET:
      c.Put(p.memset);
      return Status::Ok();
    case CU_GRAPH_NODE_TYPE_HOST: {
      if (p.host.fn == nullptr) return BadValue(c, "a host node's function is NULL");
      uint64_t id = HostCallbacks::Get().AddRepeat(p.host.fn, p.host.userData);
      if (host_id) *host_id = id;
      c.Put<uint64_t>(id);
      return Status::Ok();
    }
    case CU_GRAPH_NODE_TYPE_GRAPH:
      RETURN_IF_ERROR(c.Handle(HandleKind::kGraph, p.graph.graph, false));
      c.Put<uint32_t>(static_cast<uint32_t>(p.graph.ownership));
      return Status::Ok();
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
      return c.Handle(HandleKind::kEvent, p.eventRecord.event, false);
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
      return c.Handle(HandleKind::kEvent, p.eventWait.event, false);
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
      c.Put(p.alloc.poolProps);
      if (p.alloc.accessDescCount > 0 && p.alloc.accessDescs == nullptr) return BadValue(c, "accessDescs is NULL");
      c.PutArray(p.alloc.accessDescs, p.alloc.accessDescCount, sizeof(CUmemAccessDesc));
      c.Put<uint64_t>(p.alloc.bytesize);
      return Status::Ok();
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
      c.Put<uint64_t>(p.free.dptr);
      return Status::Ok();
    case CU_GRAPH_NODE_TYPE_CONDITIONAL:
      c.Put<uint64_t>(p.conditional.handle);
      c.Put<uint32_t>(static_cast<uint32_t>(p.conditional.type));
      c.Put<uint32_t>(p.conditional.size);
      return Status::Ok();
    case CU_GRAPH_NODE_TYPE_EMPTY:
      return Status::Ok();
    default:
      return c.Fail(CUDA_ERROR_NOT_SUPPORTED, "graph nodes of this type (external semaphores, memory operations) are not supported by Remora");
  }
}

Status ReadBindings(api::ArgReader& r, uint64_t exec) {
  uint64_t n = r.Get<uint64_t>();
  if (n > api::kMaxArgBytes / sizeof(WireBinding)) return Error(Err::kUnknown, "malformed bindings");
  std::vector<WireBinding> bindings(static_cast<size_t>(n));
  for (auto& b : bindings) b = r.Get<WireBinding>();
  Runtime::Get().graphs().SetBindings(exec, std::move(bindings));
  return Status::Ok();
}

}  // namespace remora::shim
