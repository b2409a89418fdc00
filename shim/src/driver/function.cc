// Functions and kernels as objects: attributes (answered from what the worker reported when
// the function was resolved, and kept in step with what the application sets), names,
// parameter layouts, cache configuration and the occupancy calculator. A CUfunction is the
// worker's function handle, bound to one device; a CUkernel is the Registry's FunctionRecord
// and resolves to a CUfunction on each device it is used on.
#include "driver/contexts.h"
#include "driver/driver.h"
#include "driver/objects.h"
#include "export.h"
#include "modules.h"
#include "process.h"
#include "registry.h"
#include "runtime.h"

using namespace remora;
using namespace remora::shim;
using namespace remora::shim::driver;

namespace {

DriverObjects& Objects() { return Process::Get().driver_objects(); }

Result<FunctionInfo> Fn(CUfunction f) { return FunctionOrKernel(f); }

Result<FunctionRecord*> Kernel(CUkernel k) {
  FunctionRecord* f = FunctionFromHost(k);
  if (f == nullptr) return Status(Domain::kCuda, CUDA_ERROR_INVALID_HANDLE, "not a kernel of this process");
  return f;
}

Result<int> Attr(const KernelInfo& k, CUfunction_attribute a) {
  if (a < 0 || a >= CU_FUNC_ATTRIBUTE_MAX) return Status(Domain::kCuda, CUDA_ERROR_INVALID_VALUE, "unknown attribute");
  if (static_cast<size_t>(a) >= k.attributes.size()) return 0;
  return k.attributes[static_cast<size_t>(a)];
}

CUresult ParamInfo(const KernelInfo& k, size_t index, size_t* offset, size_t* size, const char* call) {
  if (index >= k.params.size()) return Invalid(call, "paramIndex is past the kernel's parameters");
  if (offset != nullptr) *offset = k.params[index].first;
  if (size != nullptr) *size = k.params[index].second;
  return CUDA_SUCCESS;
}

cudaLaunchConfig_t RuntimeConfig(const CUlaunchConfig& c) {
  cudaLaunchConfig_t r{};
  r.gridDim = dim3(c.gridDimX, c.gridDimY, c.gridDimZ);
  r.blockDim = dim3(c.blockDimX, c.blockDimY, c.blockDimZ);
  r.dynamicSmemBytes = c.sharedMemBytes;
  r.stream = reinterpret_cast<cudaStream_t>(c.hStream);
  r.attrs = reinterpret_cast<cudaLaunchAttribute*>(c.attrs);  // the same layout and ids
  r.numAttrs = c.numAttrs;
  return r;
}

CUresult Occupancy(CUfunction func, OccupancyKind kind, int block, size_t smem, unsigned flags, int blocks,
                   const CUlaunchConfig* config, int64_t* out, const char* call) {
  auto f = Fn(func);
  if (!f.ok()) return FromStatus(f.status(), call);
  cudaLaunchConfig_t rc;
  if (config != nullptr) rc = RuntimeConfig(*config);
  auto v = FunctionOccupancy(f->device, f->kernel->handle, kind, block, smem, flags, blocks, config ? &rc : nullptr);
  if (!v.ok()) return FromStatus(v.status(), call);
  *out = *v;
  return CUDA_SUCCESS;
}

}  // namespace

// ---- CUfunction ---------------------------------------------------------------------------------

REMORA_API CUresult cuFuncGetAttribute(int* pi, CUfunction_attribute attrib, CUfunction hfunc) {
  if (pi == nullptr) return Invalid("cuFuncGetAttribute", "pi is NULL");
  auto f = Fn(hfunc);
  if (!f.ok()) return FromStatus(f.status(), "cuFuncGetAttribute");
  auto v = Attr(*f->kernel, attrib);
  if (!v.ok()) return FromStatus(v.status(), "cuFuncGetAttribute");
  *pi = *v;
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value) {
  auto f = Fn(hfunc);
  if (!f.ok()) return FromStatus(f.status(), "cuFuncSetAttribute");
  return FromStatus(SetFunctionAttribute(const_cast<KernelInfo*>(f->kernel), attrib, value), "cuFuncSetAttribute");
}

REMORA_API CUresult cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config) {
  auto f = Fn(hfunc);
  if (!f.ok()) return FromStatus(f.status(), "cuFuncSetCacheConfig");
  return FromStatus(SetFunctionCacheConfig(f->kernel->handle, config), "cuFuncSetCacheConfig");
}

REMORA_API CUresult cuFuncGetModule(CUmodule* hmod, CUfunction hfunc) {
  if (hmod == nullptr) return Invalid("cuFuncGetModule", "hmod is NULL");
  auto f = Fn(hfunc);
  if (!f.ok()) return FromStatus(f.status(), "cuFuncGetModule");
  *hmod = reinterpret_cast<CUmodule>(f->module);
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuFuncGetName(const char** name, CUfunction hfunc) {
  if (name == nullptr) return Invalid("cuFuncGetName", "name is NULL");
  auto f = Fn(hfunc);
  if (!f.ok()) return FromStatus(f.status(), "cuFuncGetName");
  *name = f->kernel->name.c_str();  // the KernelInfo is never freed
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuFuncGetParamInfo(CUfunction func, size_t index, size_t* offset, size_t* size) {
  auto f = Fn(func);
  if (!f.ok()) return FromStatus(f.status(), "cuFuncGetParamInfo");
  return ParamInfo(*f->kernel, index, offset, size, "cuFuncGetParamInfo");
}

REMORA_API CUresult cuFuncIsLoaded(CUfunctionLoadingState* state, CUfunction func) {
  if (state == nullptr) return Invalid("cuFuncIsLoaded", "state is NULL");
  auto f = Fn(func);
  if (!f.ok()) return FromStatus(f.status(), "cuFuncIsLoaded");
  *state = CU_FUNCTION_LOADING_STATE_LOADED;  // the worker resolved it when it was handed out
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuFuncLoad(CUfunction func) {
  auto f = Fn(func);
  return f.ok() ? CUDA_SUCCESS : FromStatus(f.status(), "cuFuncLoad");
}

// ---- CUkernel -----------------------------------------------------------------------------------

Result<FunctionInfo> remora::shim::driver::FunctionOrKernel(CUfunction f) {
  auto info = Objects().Function(f);
  if (!info.ok() && FunctionFromHost(f) != nullptr) return FunctionOfKernel(reinterpret_cast<CUkernel>(f));
  return info;
}

Result<FunctionInfo> remora::shim::driver::FunctionOfKernel(CUkernel kernel) {
  auto k = Kernel(kernel);
  if (!k.ok()) return k.status();
  auto d = CurrentDevice();
  if (!d.ok()) return d.status();
  auto info = KernelOn(*k, *d);
  if (!info.ok()) return info.status();
  // Known to the launch path as a function of the kernel's module on this device (the static
  // runtime launches what cuLibraryGetKernel gave it, cast to CUfunction).
  FunctionInfo f{*d, (*k)->fatbin->module[static_cast<size_t>(*d)], (*k)->device_name, *info};
  Process::Get().driver_objects().AddFunction((*info)->handle, f);
  return f;
}

REMORA_API CUresult cuKernelGetFunction(CUfunction* pfunc, CUkernel kernel) {
  if (pfunc == nullptr) return Invalid("cuKernelGetFunction", "pFunc is NULL");
  auto f = FunctionOfKernel(kernel);
  if (!f.ok()) return FromStatus(f.status(), "cuKernelGetFunction");
  *pfunc = reinterpret_cast<CUfunction>(f->kernel->handle);
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuKernelGetAttribute(int* pi, CUfunction_attribute attrib, CUkernel kernel, CUdevice dev) {
  if (pi == nullptr) return Invalid("cuKernelGetAttribute", "pi is NULL");
  auto k = Kernel(kernel);
  if (!k.ok()) return FromStatus(k.status(), "cuKernelGetAttribute");
  if (auto d = Runtime::Get().Device(dev); !d.ok()) return FromStatus(d.status(), "cuKernelGetAttribute");
  auto info = KernelOn(*k, dev);
  if (!info.ok()) return FromStatus(info.status(), "cuKernelGetAttribute");
  auto v = Attr(**info, attrib);
  if (!v.ok()) return FromStatus(v.status(), "cuKernelGetAttribute");
  *pi = *v;
  return CUDA_SUCCESS;
}

// The runtime's kernel calls share these (modules.h): set on the device and remembered.
REMORA_API CUresult cuKernelSetAttribute(CUfunction_attribute attrib, int val, CUkernel kernel, CUdevice dev) {
  if (auto d = Runtime::Get().Device(dev); !d.ok()) return FromStatus(d.status(), "cuKernelSetAttribute");
  return Done(SetKernelAttribute(FunctionFromHost(kernel), static_cast<int>(attrib), val, dev), "cuKernelSetAttribute");
}

REMORA_API CUresult cuKernelSetCacheConfig(CUkernel kernel, CUfunc_cache config, CUdevice dev) {
  if (auto d = Runtime::Get().Device(dev); !d.ok()) return FromStatus(d.status(), "cuKernelSetCacheConfig");
  return CallOnDevice(dev, "cuKernelSetCacheConfig",
                      [&] { return SetKernelCacheConfig(FunctionFromHost(kernel), static_cast<int>(config)); });
}

REMORA_API CUresult cuKernelGetName(const char** name, CUkernel kernel) {
  if (name == nullptr) return Invalid("cuKernelGetName", "name is NULL");
  auto n = KernelName(kernel);
  if (!n.ok()) return FromStatus(n.status(), "cuKernelGetName");
  *name = *n;
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuKernelGetParamInfo(CUkernel kernel, size_t index, size_t* offset, size_t* size) {
  auto k = Kernel(kernel);
  if (!k.ok()) return FromStatus(k.status(), "cuKernelGetParamInfo");
  auto d = CurrentDevice();
  if (!d.ok()) return FromStatus(d.status(), "cuKernelGetParamInfo");
  auto info = KernelOn(*k, *d);
  if (!info.ok()) return FromStatus(info.status(), "cuKernelGetParamInfo");
  return ParamInfo(**info, index, offset, size, "cuKernelGetParamInfo");
}

REMORA_API CUresult cuKernelGetLibrary(CUlibrary* plib, CUkernel kernel) {
  if (plib == nullptr) return Invalid("cuKernelGetLibrary", "pLib is NULL");
  auto k = Kernel(kernel);
  if (!k.ok()) return FromStatus(k.status(), "cuKernelGetLibrary");
  LibraryRecord* l = Objects().LibraryOf(*k);
  if (l == nullptr)  // a kernel of the application's own fat binaries
    return FromStatus(Status(Domain::kCuda, CUDA_ERROR_NOT_FOUND, "the kernel belongs to no library"), "cuKernelGetLibrary");
  *plib = reinterpret_cast<CUlibrary>(l);
  return CUDA_SUCCESS;
}

// ---- occupancy ------------------------------------------------------------------------------------

REMORA_API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* num, CUfunction func, int block, size_t smem,
                                                                         unsigned int flags) {
  if (num == nullptr) return Invalid("cuOccupancyMaxActiveBlocksPerMultiprocessor", "numBlocks is NULL");
  int64_t v = 0;
  CUresult r = Occupancy(func, OccupancyKind::kMaxActiveBlocks, block, smem, flags, 0, nullptr, &v,
                         "cuOccupancyMaxActiveBlocksPerMultiprocessor");
  if (r == CUDA_SUCCESS) *num = static_cast<int>(v);
  return r;
}

REMORA_API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int* num, CUfunction func, int block, size_t smem) {
  return cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(num, func, block, smem, 0);
}

REMORA_API CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t* smem, CUfunction func, int blocks, int block) {
  if (smem == nullptr) return Invalid("cuOccupancyAvailableDynamicSMemPerBlock", "dynamicSmemSize is NULL");
  int64_t v = 0;
  CUresult r = Occupancy(func, OccupancyKind::kAvailableDynamicSmem, block, 0, 0, blocks, nullptr, &v,
                         "cuOccupancyAvailableDynamicSMemPerBlock");
  if (r == CUDA_SUCCESS) *smem = static_cast<size_t>(v);
  return r;
}

REMORA_API CUresult cuOccupancyMaxActiveClusters(int* clusters, CUfunction func, const CUlaunchConfig* config) {
  if (clusters == nullptr || config == nullptr) return Invalid("cuOccupancyMaxActiveClusters", "NULL argument");
  int64_t v = 0;
  CUresult r = Occupancy(func, OccupancyKind::kMaxActiveClusters, 0, 0, 0, 0, config, &v,
                         "cuOccupancyMaxActiveClusters");
  if (r == CUDA_SUCCESS) *clusters = static_cast<int>(v);
  return r;
}

REMORA_API CUresult cuOccupancyMaxPotentialClusterSize(int* size, CUfunction func, const CUlaunchConfig* config) {
  if (size == nullptr || config == nullptr) return Invalid("cuOccupancyMaxPotentialClusterSize", "NULL argument");
  int64_t v = 0;
  CUresult r = Occupancy(func, OccupancyKind::kMaxPotentialClusterSize, 0, 0, 0, 0, config, &v,
                         "cuOccupancyMaxPotentialClusterSize");
  if (r == CUDA_SUCCESS) *size = static_cast<int>(v);
  return r;
}

// The block size with the most resident threads per multiprocessor, as CUDA computes it:
// every multiple of the warp size up to the kernel's and the caller's limit, the worker's
// calculator for each (the dynamic shared memory may depend on the block size).
REMORA_API CUresult cuOccupancyMaxPotentialBlockSizeWithFlags(int* min_grid, int* block_size, CUfunction func,
                                                              CUoccupancyB2DSize smem_of_block, size_t smem,
                                                              int limit, unsigned int flags) {
  const char* call = "cuOccupancyMaxPotentialBlockSize";
  if (min_grid == nullptr || block_size == nullptr) return Invalid(call, "NULL argument");
  auto f = Fn(func);
  if (!f.ok()) return FromStatus(f.status(), call);
  auto dev = Runtime::Get().Device(f->device);
  if (!dev.ok()) return FromStatus(dev.status(), call);
  auto attr = [&](CUdevice_attribute a) {
    return static_cast<size_t>(a) < (*dev)->attributes.size() ? (*dev)->attributes[a] : 0;
  };
  int warp = std::max(1, attr(CU_DEVICE_ATTRIBUTE_WARP_SIZE));
  int sms = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  int max_threads = std::min(attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK), f->kernel->attributes.empty()
                                                                                  ? 1024
                                                                                  : f->kernel->attributes[0]);
  if (limit > 0) max_threads = std::min(max_threads, limit);
  int best_block = 0, best_threads = 0, best_blocks = 0;
  for (int b = (max_threads / warp) * warp; b > 0; b -= warp) {
    size_t s = smem_of_block != nullptr ? smem_of_block(b) : smem;
    int64_t n = 0;
    CUresult r = Occupancy(func, OccupancyKind::kMaxActiveBlocks, b, s, flags, 0, nullptr, &n, call);
    if (r != CUDA_SUCCESS) return r;
    if (n * b > best_threads) {
      best_threads = static_cast<int>(n * b);
      best_block = b;
      best_blocks = static_cast<int>(n);
    }
    if (best_threads == attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR)) break;  // cannot do better
  }
  *block_size = best_block;
  *min_grid = best_blocks * sms;
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuOccupancyMaxPotentialBlockSize(int* min_grid, int* block_size, CUfunction func,
                                                     CUoccupancyB2DSize smem_of_block, size_t smem, int limit) {
  return cuOccupancyMaxPotentialBlockSizeWithFlags(min_grid, block_size, func, smem_of_block, smem, limit, 0);
}
