// Code on the server, loaded lazily: a fat binary is shipped (by content hash, the image
// only if the server has not seen it) when one of its kernels or variables is first used on
// a device; kernel layouts and variable addresses are then cached per device.
// Thread-safe.
#pragma once

#include <memory>
#include <string>

#include "registry.h"
#include "runtime.h"

namespace remora::shim {

// Asks the worker for function `name` of `module` (its handle, parameter layout, attributes).
Result<std::unique_ptr<KernelInfo>> FetchFunction(Client* client, int device, uint64_t module, const std::string& name);
// Asks the worker for variable `name` of `module` (address and size) and records it as
// device memory of the client's tables. `size_hint`: the size the application registered.
Result<std::pair<uint64_t, uint64_t>> FetchGlobal(Client* client, int device, uint64_t module, const std::string& name,
                                                  size_t size_hint, bool* managed = nullptr);
// A function's attribute on the worker (on the function's device), kept in step in `k`'s
// cached attributes.
Status SetFunctionAttribute(KernelInfo* k, int attr, int value);
Status SetFunctionCacheConfig(uint64_t handle, int config);
// What FunctionOccupancy asks of the driver's occupancy calculator.
enum class OccupancyKind { kMaxActiveBlocks, kAvailableDynamicSmem, kMaxActiveClusters, kMaxPotentialClusterSize };
// The worker's occupancy calculator for function `handle` of `device`. Answers to queries
// without a launch configuration (the cluster queries need one) are kept in the client until
// ForgetOccupancy. Thread-safe.
Result<int64_t> FunctionOccupancy(int device, uint64_t handle, OccupancyKind kind, int block_size, size_t smem,
                                  unsigned flags, int num_blocks, const cudaLaunchConfig_t* config);
// Every attribute of function `handle` (CUfunction_attribute order), asked of the worker.
Status FunctionAttributes(uint64_t handle, int* values, unsigned count);
// Drops the kept occupancy answers: a kernel's or the context's cache or shared-memory
// configuration changed, a module went, or the session moved.
void ForgetOccupancy();
// Unloads a module on the worker, on its device (the driver API's cuModuleUnload and
// cuLibraryUnload).
Status UnloadModule(uint64_t module);
// The module of `image` on `device` (loaded on first use; a fresh image's load is a module of
// its own).
Result<uint64_t> LoadImage(FatbinRecord* image, int device);
// The kernel on `device` (an ordinal < kMaxDevices), loading what it needs.
Result<const KernelInfo*> KernelOn(FunctionRecord* f, int device);
// Device address and size of a variable on `device`.
Result<std::pair<uint64_t, uint64_t>> GlobalOn(VariableRecord* v, int device);
// The function record behind a host-side kernel pointer (stub address or cudaKernel_t).
FunctionRecord* FunctionFromHost(const void* func);

// A registered kernel's attribute set on `device` and remembered for the devices it loads on
// later (cudaFuncSetAttribute, cudaKernelSetAttributeForDevice, cuKernelSetAttribute).
Status SetKernelAttribute(FunctionRecord* f, int attr, int value, int device);
// A registered kernel's cache configuration on the calling thread's current device, remembered
// likewise (cudaFuncSetCacheConfig, cuKernelSetCacheConfig).
Status SetKernelCacheConfig(FunctionRecord* f, int config);
// A registered kernel's device-side name; it lives as long as the kernel's registration.
Result<const char*> KernelName(const void* func);

}  // namespace remora::shim

namespace remora::gen::cuda {

// The client hook (cuda.api `mirror=`) of the entries that change a context's or a function's
// cache or shared-memory configuration: their arguments do not matter, only that the
// occupancy answers kept in the client may no longer hold.
template <typename... Args>
void OccupancyConfigChanged(const Args&...) {
  shim::ForgetOccupancy();
}

}  // namespace remora::gen::cuda
