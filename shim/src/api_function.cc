// Kernels as objects: attributes, cache and shared-memory configuration, parameter layout,
// names and handles, occupancy. Attribute changes are remembered per kernel and re-applied
// when it first loads on another device; what the client knows of a kernel (name, layout,
// attributes) is answered without a round trip.
#include <cuda_runtime_api.h>

#include <cstring>

#include "cuda_client.h"
#include "export.h"
#include "modules.h"
#include "runtime.h"

namespace remora::shim {
namespace {

// The kernel on the calling thread's current device, for attribute and occupancy queries.
Result<std::pair<int, const KernelInfo*>> CurrentKernel(const void* func) {
  FunctionRecord* f = FunctionFromHost(func);
  if (f == nullptr) return Error(Err::kInvalidDeviceFunction, "{} is not a registered kernel", func);
  ASSIGN_OR_RETURN(int device, Runtime::Get().CurrentDevice());
  ASSIGN_OR_RETURN(const KernelInfo* k, KernelOn(f, device));
  return std::make_pair(device, k);
}

Result<int64_t> Occupancy(const void* func, OccupancyKind kind, int block_size, size_t smem, unsigned flags,
                          int num_blocks, const cudaLaunchConfig_t* config) {
  ASSIGN_OR_RETURN(auto k, CurrentKernel(func));
  return FunctionOccupancy(k.first, k.second->handle, kind, block_size, smem, flags, num_blocks, config);
}

}  // namespace

Status SetKernelAttribute(FunctionRecord* f, int attr, int value, int device) {
  if (f == nullptr) return Error(Err::kInvalidDeviceFunction, "not a registered kernel");
  ASSIGN_OR_RETURN(const KernelInfo* k, KernelOn(f, device));
  RETURN_IF_ERROR(SetFunctionAttribute(const_cast<KernelInfo*>(k), attr, value));
  std::lock_guard<std::mutex> lock(f->mu);
  f->set_attributes[attr] = value;
  return Status::Ok();
}

Status SetKernelCacheConfig(FunctionRecord* f, int config) {
  if (f == nullptr) return Error(Err::kInvalidDeviceFunction, "not a registered kernel");
  ASSIGN_OR_RETURN(int device, Runtime::Get().CurrentDevice());
  ASSIGN_OR_RETURN(const KernelInfo* k, KernelOn(f, device));
  RETURN_IF_ERROR(SetFunctionCacheConfig(k->handle, config));
  std::lock_guard<std::mutex> lock(f->mu);
  f->cache_config = config;
  return Status::Ok();
}

Result<const char*> KernelName(const void* func) {
  FunctionRecord* f = FunctionFromHost(func);
  if (f == nullptr) return Error(Err::kInvalidDeviceFunction, "{} is not a registered kernel", func);
  return f->device_name.c_str();
}

}  // namespace remora::shim

using namespace remora;
using namespace remora::shim;

REMORA_API cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, const void* func) {
  if (attr == nullptr) return Finish(Error(Err::kInvalidValue, "attr is NULL"), "cudaFuncGetAttributes");
  auto k = CurrentKernel(func);
  if (!k.ok()) return Finish(k.status(), "cudaFuncGetAttributes");
  int a[16] = {};
  Status st = FunctionAttributes(k->second->handle, a, 16);
  if (!st.ok()) return Finish(st, "cudaFuncGetAttributes");
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
  auto dev = Runtime::Get().CurrentDevice();
  if (!dev.ok()) return Finish(dev.status(), "cudaFuncSetAttribute");
  return Finish(SetKernelAttribute(f, static_cast<int>(attr), value, *dev), "cudaFuncSetAttribute");
}

REMORA_API cudaError_t cudaFuncSetCacheConfig(const void* func, cudaFuncCache cacheConfig) {
  return Finish(SetKernelCacheConfig(FunctionFromHost(func), static_cast<int>(cacheConfig)), "cudaFuncSetCacheConfig");
}

REMORA_API cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* numBlocks, const void* func,
                                                                             int blockSize, size_t dynamicSMemSize,
                                                                             unsigned int flags) {
  if (numBlocks == nullptr) return Finish(Error(Err::kInvalidValue, "numBlocks is NULL"), "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  auto v = Occupancy(func, OccupancyKind::kMaxActiveBlocks, blockSize, dynamicSMemSize, flags, 0, nullptr);
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
  auto v = Occupancy(func, OccupancyKind::kAvailableDynamicSmem, blockSize, 0, 0, numBlocks, nullptr);
  if (!v.ok()) return Finish(v.status(), "cudaOccupancyAvailableDynamicSMemPerBlock");
  *dynamicSmemSize = static_cast<size_t>(*v);
  return cudaSuccess;
}

REMORA_API cudaError_t cudaOccupancyMaxActiveClusters(int* numClusters, const void* func, const cudaLaunchConfig_t* config) {
  if (numClusters == nullptr || config == nullptr) return Finish(Error(Err::kInvalidValue, "NULL argument"), "cudaOccupancyMaxActiveClusters");
  auto v = Occupancy(func, OccupancyKind::kMaxActiveClusters, 0, 0, 0, 0, config);
  if (!v.ok()) return Finish(v.status(), "cudaOccupancyMaxActiveClusters");
  *numClusters = static_cast<int>(*v);
  return cudaSuccess;
}

REMORA_API cudaError_t cudaKernelSetAttributeForDevice(cudaKernel_t kernel, cudaFuncAttribute attr, int value, int device) {
  auto d = Runtime::Get().Device(device);
  if (!d.ok()) return Finish(d.status(), "cudaKernelSetAttributeForDevice");
  return Finish(SetKernelAttribute(FunctionFromHost(kernel), static_cast<int>(attr), value, device),
                "cudaKernelSetAttributeForDevice");
}

REMORA_API cudaError_t cudaFuncGetName(const char** name, const void* func) {
  if (name == nullptr) return Finish(Error(Err::kInvalidValue, "name is NULL"), "cudaFuncGetName");
  auto n = KernelName(func);
  if (!n.ok()) return Finish(n.status(), "cudaFuncGetName");
  *name = *n;
  return cudaSuccess;
}

REMORA_API cudaError_t cudaGetKernel(cudaKernel_t* kernelPtr, const void* entryFuncAddr) {
  if (kernelPtr == nullptr) return Finish(Error(Err::kInvalidValue, "kernelPtr is NULL"), "cudaGetKernel");
  FunctionRecord* f = FunctionFromHost(entryFuncAddr);
  if (f == nullptr) return Finish(Error(Err::kInvalidDeviceFunction, "{} is not a registered kernel", entryFuncAddr), "cudaGetKernel");
  *kernelPtr = reinterpret_cast<cudaKernel_t>(f);
  return cudaSuccess;
}

// The kernel's function on the current device: the worker's handle, which the driver API
// entries taking a CUfunction accept.
REMORA_API cudaError_t cudaGetFuncBySymbol(cudaFunction_t* functionPtr, const void* symbolPtr) {
  if (functionPtr == nullptr) return Finish(Error(Err::kInvalidValue, "functionPtr is NULL"), "cudaGetFuncBySymbol");
  auto k = CurrentKernel(symbolPtr);
  if (!k.ok()) return Finish(k.status(), "cudaGetFuncBySymbol");
  *functionPtr = reinterpret_cast<cudaFunction_t>(k->second->handle);
  return cudaSuccess;
}

REMORA_API cudaError_t cudaFuncGetParamInfo(const void* func, size_t paramIndex, size_t* paramOffset, size_t* paramSize) {
  auto k = CurrentKernel(func);
  if (!k.ok()) return Finish(k.status(), "cudaFuncGetParamInfo");
  const auto& params = k->second->params;
  if (paramIndex >= params.size())
    return Finish(Error(Err::kInvalidValue, "kernel has {} parameters; index {} is out of range", params.size(), paramIndex),
                  "cudaFuncGetParamInfo");
  if (paramOffset != nullptr) *paramOffset = params[paramIndex].first;
  if (paramSize != nullptr) *paramSize = params[paramIndex].second;
  return cudaSuccess;
}

REMORA_API cudaError_t cudaFuncSetSharedMemConfig(const void* func, cudaSharedMemConfig config) {
  auto k = CurrentKernel(func);
  if (!k.ok()) return Finish(k.status(), "cudaFuncSetSharedMemConfig");
  Status st = gen::cuda::cuFuncSetSharedMemConfig(CallCtx{false, "cudaFuncSetSharedMemConfig"},
                                                  reinterpret_cast<CUfunction>(k->second->handle),
                                                  static_cast<CUsharedconfig>(config));
  return Finish(st, "cudaFuncSetSharedMemConfig");
}

REMORA_API cudaError_t cudaOccupancyMaxPotentialClusterSize(int* clusterSize, const void* func, const cudaLaunchConfig_t* launchConfig) {
  if (clusterSize == nullptr || launchConfig == nullptr)
    return Finish(Error(Err::kInvalidValue, "NULL argument"), "cudaOccupancyMaxPotentialClusterSize");
  auto v = Occupancy(func, OccupancyKind::kMaxPotentialClusterSize, 0, 0, 0, 0, launchConfig);
  if (!v.ok()) return Finish(v.status(), "cudaOccupancyMaxPotentialClusterSize");
  *clusterSize = static_cast<int>(*v);
  return cudaSuccess;
}
