// Kernel launches (nvcc's __cudaLaunchKernel path and the public cudaLaunchKernel family),
// function attributes and occupancy. A launch is asynchronous: the parameters are packed at
// the offsets the worker's driver reported for the kernel and sent without waiting.
#include <cuda_runtime_api.h>

#include <cstring>

#include "export.h"
#include "modules.h"
#include "runtime.h"
#include "wire_args.h"

namespace remora::shim {
namespace {

struct Launch {
  dim3 grid, block;
  size_t shared_mem = 0;
  cudaStream_t stream = nullptr;
  bool per_thread = false;
  bool cooperative = false;
  const cudaLaunchAttribute* attrs = nullptr;
  unsigned num_attrs = 0;
};

// Checks a launch as the runtime would before enqueuing it, so configuration errors are
// returned by the launch itself.
Status Validate(const Launch& l, const KernelInfo& k, const DeviceEntry& d) {
  auto attr = [&](cudaDeviceAttr a) { return static_cast<size_t>(a) < d.attributes.size() ? d.attributes[a] : 0; };
  // CUDA 13 answers these with cudaErrorInvalidValue (checked against the native runtime).
  if (l.grid.x == 0 || l.grid.y == 0 || l.grid.z == 0 || l.block.x == 0 || l.block.y == 0 || l.block.z == 0)
    return Error(Err::kInvalidValue, "a grid or block dimension is 0");
  if (l.block.x > static_cast<unsigned>(attr(cudaDevAttrMaxBlockDimX)) || l.block.y > static_cast<unsigned>(attr(cudaDevAttrMaxBlockDimY)) ||
      l.block.z > static_cast<unsigned>(attr(cudaDevAttrMaxBlockDimZ)) || l.grid.x > static_cast<unsigned>(attr(cudaDevAttrMaxGridDimX)) ||
      l.grid.y > static_cast<unsigned>(attr(cudaDevAttrMaxGridDimY)) || l.grid.z > static_cast<unsigned>(attr(cudaDevAttrMaxGridDimZ)))
    return Error(Err::kInvalidValue, "grid ({},{},{}) or block ({},{},{}) exceeds the device's limits", l.grid.x,
                 l.grid.y, l.grid.z, l.block.x, l.block.y, l.block.z);
  uint64_t threads = uint64_t{l.block.x} * l.block.y * l.block.z;
  if (threads > static_cast<uint64_t>(attr(cudaDevAttrMaxThreadsPerBlock)))
    return Error(Err::kInvalidValue, "{} threads per block exceed the device's {}", threads, attr(cudaDevAttrMaxThreadsPerBlock));
  if (!k.attributes.empty() && k.attributes[0] > 0 && threads > static_cast<uint64_t>(k.attributes[0]))
    return Error(Err::kLaunchOutOfResources, "{} threads per block exceed this kernel's {}", threads, k.attributes[0]);
  // Dynamic shared memory beyond the kernel's limit (raised with cudaFuncSetAttribute).
  constexpr size_t kMaxDynamicSmem = 8;  // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
  if (k.attributes.size() > kMaxDynamicSmem && l.shared_mem > static_cast<size_t>(k.attributes[kMaxDynamicSmem]))
    return Error(Err::kInvalidValue, "{} bytes of dynamic shared memory exceed this kernel's {} (see cudaFuncAttributeMaxDynamicSharedMemorySize)",
                 l.shared_mem, k.attributes[kMaxDynamicSmem]);
  return Status::Ok();
}

cudaError_t DoLaunch(FunctionRecord* f, const Launch& l, void** args, const char* call) {
  Runtime& rt = Runtime::Get();
  // What CUDA 13 answers for a pointer that is not a kernel.
  if (f == nullptr) return Finish(Error(Err::kInvalidResourceHandle, "not a registered kernel"), call);
  auto c = rt.Session();
  if (!c.ok()) return Finish(c.status(), call);
  int device = 0;
  Status st = rt.CheckStream(l.stream, &device);
  if (!st.ok()) return Finish(st, call);
  auto dev = rt.Device(device);
  if (!dev.ok()) return Finish(dev.status(), call);
  // A detached device has no limits to validate against: its calls fail as such.
  if ((*dev)->detached) return Finish(Error(Err::kDevicesUnavailable, "device {} was detached", device), call);
  auto k = KernelOn(f, device);
  if (!k.ok()) return Finish(k.status(), call);
  st = Validate(l, **k, **dev);
  if (!st.ok()) return Finish(st, call);
  const KernelInfo& info = **k;
  if (!info.params.empty() && args == nullptr)
    return Finish(Error(Err::kInvalidValue, "kernel {} takes {} parameters but args is NULL", f->device_name, info.params.size()), call);
  st = (*c)->Post(device, [&](wire::Request::Builder& r) {
    auto m = r.initLaunchKernel();
    m.setFunction(info.handle);
    auto g = m.initGrid();
    g.setX(l.grid.x);
    g.setY(l.grid.y);
    g.setZ(l.grid.z);
    auto b = m.initBlock();
    b.setX(l.block.x);
    b.setY(l.block.y);
    b.setZ(l.block.z);
    m.setSharedMem(static_cast<uint32_t>(l.shared_mem));
    auto s = m.initStream();
    s.setHandle(U(l.stream));
    s.setPerThread(l.per_thread);
    m.setCooperative(l.cooperative);
    auto p = m.initParams(info.param_bytes);
    for (size_t i = 0; i < info.params.size(); i++)
      std::memcpy(p.begin() + info.params[i].first, args[i], info.params[i].second);
    if (l.num_attrs > 0) {
      auto attrs = m.initAttributes(l.num_attrs);
      for (unsigned i = 0; i < l.num_attrs; i++) {
        attrs[i].setId(static_cast<uint32_t>(l.attrs[i].id));
        attrs[i].setValue(capnp::Data::Reader(reinterpret_cast<const uint8_t*>(&l.attrs[i].val), sizeof(l.attrs[i].val)));
      }
    }
  });
  return Finish(st, call);
}

cudaError_t LaunchEx(const cudaLaunchConfig_t* config, const void* func, void** args, bool per_thread, const char* call) {
  if (config == nullptr) return Finish(Error(Err::kInvalidValue, "config is NULL"), call);
  Launch l;
  l.grid = config->gridDim;
  l.block = config->blockDim;
  l.shared_mem = config->dynamicSmemBytes;
  l.stream = config->stream;
  l.per_thread = per_thread;
  l.attrs = config->attrs;
  l.num_attrs = config->numAttrs;
  return DoLaunch(FunctionFromHost(func), l, args, call);
}

// The kernel on the calling thread's current device, for attribute and occupancy queries.
Result<std::pair<int, const KernelInfo*>> CurrentKernel(const void* func) {
  FunctionRecord* f = FunctionFromHost(func);
  if (f == nullptr) return Error(Err::kInvalidDeviceFunction, "{} is not a registered kernel", func);
  ASSIGN_OR_RETURN(int device, Runtime::Get().CurrentDevice());
  ASSIGN_OR_RETURN(const KernelInfo* k, KernelOn(f, device));
  return std::make_pair(device, k);
}

Result<int64_t> Occupancy(const void* func, wire::Occupancy::Kind kind, int block_size, size_t smem, unsigned flags,
                          int num_blocks, const cudaLaunchConfig_t* config) {
  ASSIGN_OR_RETURN(auto k, CurrentKernel(func));
  int64_t value = 0;
  RETURN_IF_ERROR((*Runtime::Get().Session())->Call(k.first, [&](wire::Request::Builder& r) {
    auto o = r.initOccupancy();
    o.setFunction(k.second->handle);
    o.setKind(kind);
    o.setBlockSize(block_size);
    o.setDynamicSmem(smem);
    o.setFlags(flags);
    o.setNumBlocks(num_blocks);
    if (config != nullptr) {
      auto l = o.initLaunch();
      auto g = l.initGrid();
      g.setX(config->gridDim.x);
      g.setY(config->gridDim.y);
      g.setZ(config->gridDim.z);
      auto b = l.initBlock();
      b.setX(config->blockDim.x);
      b.setY(config->blockDim.y);
      b.setZ(config->blockDim.z);
      l.setSharedMem(static_cast<uint32_t>(config->dynamicSmemBytes));
      auto attrs = l.initAttributes(config->numAttrs);
      for (unsigned i = 0; i < config->numAttrs; i++) {
        attrs[i].setId(static_cast<uint32_t>(config->attrs[i].id));
        attrs[i].setValue(capnp::Data::Reader(reinterpret_cast<const uint8_t*>(&config->attrs[i].val), sizeof(config->attrs[i].val)));
      }
    }
  }, [&](wire::Reply::Reader& r) -> Status {
    value = r.getValue();
    return Status::Ok();
  }));
  return value;
}

}  // namespace
}  // namespace remora::shim

using namespace remora;
using namespace remora::shim;

REMORA_API cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void** args, size_t sharedMem,
                                          cudaStream_t stream) {
  Launch l{gridDim, blockDim, sharedMem, stream, false};
  return DoLaunch(reinterpret_cast<FunctionRecord*>(kernel), l, args, "__cudaLaunchKernel");
}
REMORA_API cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void** args,
                                               size_t sharedMem, cudaStream_t stream) {
  Launch l{gridDim, blockDim, sharedMem, stream, true};
  return DoLaunch(reinterpret_cast<FunctionRecord*>(kernel), l, args, "__cudaLaunchKernel");
}
REMORA_API cudaError_t cudaLaunchKernel(const void* func, dim3 gridDim, dim3 blockDim, void** args, size_t sharedMem,
                                        cudaStream_t stream) {
  Launch l{gridDim, blockDim, sharedMem, stream, false};
  return DoLaunch(FunctionFromHost(func), l, args, "cudaLaunchKernel");
}
REMORA_API cudaError_t cudaLaunchKernel_ptsz(const void* func, dim3 gridDim, dim3 blockDim, void** args, size_t sharedMem,
                                             cudaStream_t stream) {
  Launch l{gridDim, blockDim, sharedMem, stream, true};
  return DoLaunch(FunctionFromHost(func), l, args, "cudaLaunchKernel");
}
REMORA_API cudaError_t cudaLaunchCooperativeKernel(const void* func, dim3 gridDim, dim3 blockDim, void** args,
                                                   size_t sharedMem, cudaStream_t stream) {
  Launch l{gridDim, blockDim, sharedMem, stream, false, true};
  return DoLaunch(FunctionFromHost(func), l, args, "cudaLaunchCooperativeKernel");
}
REMORA_API cudaError_t cudaLaunchCooperativeKernel_ptsz(const void* func, dim3 gridDim, dim3 blockDim, void** args,
                                                        size_t sharedMem, cudaStream_t stream) {
  Launch l{gridDim, blockDim, sharedMem, stream, true, true};
  return DoLaunch(FunctionFromHost(func), l, args, "cudaLaunchCooperativeKernel");
}
REMORA_API cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* config, const void* func, void** args) {
  return LaunchEx(config, func, args, false, "cudaLaunchKernelExC");
}
REMORA_API cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t* config, const void* func, void** args) {
  return LaunchEx(config, func, args, true, "cudaLaunchKernelExC");
}

REMORA_API cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, const void* func) {
  if (attr == nullptr) return Finish(Error(Err::kInvalidValue, "attr is NULL"), "cudaFuncGetAttributes");
  auto k = CurrentKernel(func);
  if (!k.ok()) return Finish(k.status(), "cudaFuncGetAttributes");
  std::vector<int32_t> a;
  Status st = (*Runtime::Get().Session())->Call(k->first, [&](wire::Request::Builder& r) { r.setFuncGetAttributes(k->second->handle); },
                                                [&](wire::Reply::Reader& r) -> Status {
                                                  for (int32_t v : r.getAttributes()) a.push_back(v);
                                                  return Status::Ok();
                                                });
  if (!st.ok()) return Finish(st, "cudaFuncGetAttributes");
  a.resize(16, 0);
  std::memset(attr, 0, sizeof(*attr));
  attr->maxThreadsPerBlock = a[0];
  attr->sharedSizeBytes = static_cast<size_t>(a[1]);
  attr->constSizeBytes = static_cast<size_t>(a[2]);
  attr->localSizeBytes = static_cast<size_t>(a[3]);
  attr->numRegs = a[4];
  attr->ptxVersion = a[5];
  attr->binaryVersion = a[6];
  attr->cacheModeCA = a[7];
  attr->maxDynamicSharedSizeBytes = a[8];
  attr->preferredShmemCarveout = a[9];
  attr->clusterDimMustBeSet = a[10];
  attr->requiredClusterWidth = a[11];
  attr->requiredClusterHeight = a[12];
  attr->requiredClusterDepth = a[13];
  attr->nonPortableClusterSizeAllowed = a[14];
  attr->clusterSchedulingPolicyPreference = a[15];
  return cudaSuccess;
}

REMORA_API cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  FunctionRecord* f = FunctionFromHost(func);
  if (f == nullptr) return Finish(Error(Err::kInvalidDeviceFunction, "not a registered kernel"), "cudaFuncSetAttribute");
  auto k = CurrentKernel(func);
  if (!k.ok()) return Finish(k.status(), "cudaFuncSetAttribute");
  Status st = (*Runtime::Get().Session())->Call(k->first, [&](wire::Request::Builder& r) {
    auto a = r.initFuncSetAttribute();
    a.setFunction(k->second->handle);
    a.setAttribute(static_cast<int32_t>(attr));
    a.setValue(value);
  }, [](wire::Reply::Reader&) { return Status::Ok(); });
  if (!st.ok()) return Finish(st, "cudaFuncSetAttribute");
  std::lock_guard<std::mutex> lock(f->mu);
  f->set_attributes[static_cast<int>(attr)] = value;
  // The launch check reads the cached attributes: keep them in step.
  auto* info = const_cast<KernelInfo*>(k->second);
  if (static_cast<size_t>(attr) < info->attributes.size()) info->attributes[static_cast<size_t>(attr)] = value;
  return cudaSuccess;
}

REMORA_API cudaError_t cudaFuncSetCacheConfig(const void* func, cudaFuncCache cacheConfig) {
  FunctionRecord* f = FunctionFromHost(func);
  if (f == nullptr) return Finish(Error(Err::kInvalidDeviceFunction, "not a registered kernel"), "cudaFuncSetCacheConfig");
  auto k = CurrentKernel(func);
  if (!k.ok()) return Finish(k.status(), "cudaFuncSetCacheConfig");
  Status st = (*Runtime::Get().Session())->Call(k->first, [&](wire::Request::Builder& r) {
    auto a = r.initFuncSetCacheConfig();
    a.setFunction(k->second->handle);
    a.setValue(static_cast<int32_t>(cacheConfig));
  }, [](wire::Reply::Reader&) { return Status::Ok(); });
  if (st.ok()) {
    std::lock_guard<std::mutex> lock(f->mu);
    f->cache_config = static_cast<int>(cacheConfig);
  }
  return Finish(st, "cudaFuncSetCacheConfig");
}

REMORA_API cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* numBlocks, const void* func,
                                                                             int blockSize, size_t dynamicSMemSize,
                                                                             unsigned int flags) {
  if (numBlocks == nullptr) return Finish(Error(Err::kInvalidValue, "numBlocks is NULL"), "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  auto v = Occupancy(func, wire::Occupancy::Kind::MAX_ACTIVE_BLOCKS, blockSize, dynamicSMemSize, flags, 0, nullptr);
  if (!v.ok()) return Finish(v.status(), "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  *numBlocks = static_cast<int>(*v);
  return cudaSuccess;
}

REMORA_API cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* numBlocks, const void* func, int blockSize,
                                                                     size_t dynamicSMemSize) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize, dynamicSMemSize, 0);
}

REMORA_API cudaError_t cudaOccupancyAvailableDynamicSMemPerBlock(size_t* dynamicSmemSize, const void* func, int numBlocks,
                                                                 int blockSize) {
  if (dynamicSmemSize == nullptr) return Finish(Error(Err::kInvalidValue, "dynamicSmemSize is NULL"), "cudaOccupancyAvailableDynamicSMemPerBlock");
  auto v = Occupancy(func, wire::Occupancy::Kind::AVAILABLE_DYNAMIC_SMEM, blockSize, 0, 0, numBlocks, nullptr);
  if (!v.ok()) return Finish(v.status(), "cudaOccupancyAvailableDynamicSMemPerBlock");
  *dynamicSmemSize = static_cast<size_t>(*v);
  return cudaSuccess;
}

REMORA_API cudaError_t cudaOccupancyMaxActiveClusters(int* numClusters, const void* func, const cudaLaunchConfig_t* config) {
  if (numClusters == nullptr || config == nullptr) return Finish(Error(Err::kInvalidValue, "NULL argument"), "cudaOccupancyMaxActiveClusters");
  auto v = Occupancy(func, wire::Occupancy::Kind::MAX_ACTIVE_CLUSTERS, 0, 0, 0, 0, config);
  if (!v.ok()) return Finish(v.status(), "cudaOccupancyMaxActiveClusters");
  *numClusters = static_cast<int>(*v);
  return cudaSuccess;
}
