// The real backend's Driver (cuda_driver.cc says what it is), declared for the files that
// implement it: cuda_driver.cc (loading the driver, devices, memory, streams, events),
// cuda_driver_modules.cc (modules, linking, kernels, launches, occupancy) and
// cuda_driver_memory.cc (2D/3D copies, pools, peers, limits, IPC). Private to server/worker;
// only MakeCudaDriver (driver.h) is public. Thread-safety: the executor's thread calls it.
#pragma once

#include <cuda.h>
#include <sys/mman.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cuda_api.h"
#include "remora/base/log.h"
#include "remora/base/util.h"
#include "worker/backend/activity.h"
#include "worker/backend/cuda/cuda_libraries.h"
#include "worker/backend/driver.h"
#include "worker/backend/cuda/nvml.h"

namespace remora::worker::cuda_backend {

// Every driver entry point the backend uses, declared once: the table's member types come
// from cuda.h (so versioned _v2 signatures are right) and the names from the same list.
#define REMORA_CUDA_FUNCTIONS(X)                                                         \
  X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString)                  \
  X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceGetUuid)               \
  X(cuDeviceTotalMem) X(cuDeviceGetAttribute) X(cuDeviceGetPCIBusId)                     \
  X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent)            \
  X(cuMemGetInfo) X(cuMemAlloc) X(cuMemFree) X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync)   \
  X(cuMemcpyDtoDAsync) X(cuMemsetD8Async) X(cuMemHostAlloc) X(cuMemFreeHost)             \
  X(cuMemHostRegister) X(cuMemHostUnregister) X(cuMemHostGetDevicePointer) X(cuStreamCreateWithPriority) \
  X(cuStreamDestroy) X(cuStreamQuery) X(cuStreamSynchronize) X(cuStreamWaitEvent) X(cuStreamIsCapturing) X(cuEventCreate) \
  X(cuEventDestroy) X(cuEventRecord) X(cuEventQuery) X(cuEventSynchronize) X(cuEventElapsedTime)                \
  X(cuLaunchHostFunc) X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction)        \
  X(cuModuleGetGlobal) X(cuModuleGetFunctionCount) X(cuModuleEnumerateFunctions) X(cuFuncGetName) X(cuFuncGetParamInfo) X(cuFuncGetAttribute) \
  X(cuLaunchKernel) X(cuLaunchKernelEx) X(cuLaunchCooperativeKernel) \
  X(cuMemAllocPitch) X(cuMemcpy3DAsync) X(cuMemsetD2D8Async) \
  X(cuMemAllocAsync) X(cuMemAllocFromPoolAsync) X(cuMemFreeAsync) X(cuDeviceGetDefaultMemPool) \
  X(cuDeviceGetMemPool) X(cuDeviceSetMemPool) X(cuMemPoolCreate) X(cuMemPoolDestroy)        \
  X(cuMemPoolSetAttribute) X(cuMemPoolGetAttribute) X(cuMemPoolTrimTo) X(cuMemcpyPeerAsync) \
  X(cuDeviceCanAccessPeer) X(cuCtxEnablePeerAccess) X(cuCtxDisablePeerAccess) X(cuCtxGetLimit) \
  X(cuCtxSetLimit) X(cuCtxGetStreamPriorityRange) X(cuThreadExchangeStreamCaptureMode) X(cuLinkCreate) X(cuLinkAddData) \
  X(cuLinkComplete) X(cuLinkDestroy) X(cuIpcGetMemHandle) X(cuIpcOpenMemHandle) X(cuIpcCloseMemHandle)      \
  X(cuIpcGetEventHandle) X(cuIpcOpenEventHandle) X(cuMemPoolExportToShareableHandle)                   \
  X(cuMemPoolImportFromShareableHandle) X(cuMemPoolExportPointer) X(cuMemPoolImportPointer) X(cuPointerGetAttribute)

struct Api {
#define REMORA_DECLARE(name) decltype(&::name) name = nullptr;
  REMORA_CUDA_FUNCTIONS(REMORA_DECLARE)
#undef REMORA_DECLARE
};

using GetProcAddressFn = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

// Relaxes the calling thread's stream-capture mode for the scope (so that the worker's own
// allocations are allowed while the application's capture would forbid them), then restores it.
class RelaxedCapture {
 public:
  explicit RelaxedCapture(const Api& api) : api_(api) {
    ok_ = api_.cuThreadExchangeStreamCaptureMode(&mode_) == CUDA_SUCCESS;
  }
  ~RelaxedCapture() {
    if (ok_) (void)api_.cuThreadExchangeStreamCaptureMode(&mode_);
  }
  RelaxedCapture(const RelaxedCapture&) = delete;
  RelaxedCapture& operator=(const RelaxedCapture&) = delete;

 private:
  const Api& api_;
  CUstreamCaptureMode mode_ = CU_STREAM_CAPTURE_MODE_RELAXED;
  bool ok_ = false;
};

// The version in the first line of /proc/driver/nvidia/version ("NVRM version: NVIDIA UNIX
// x86_64 Kernel Module  580.159.04  ..." or "... Open Kernel Module for x86_64  580.159.04
// ..."): the first word after "Kernel Module" of digits and dots; empty if none.
std::string KernelModuleVersion(const std::string& line);

class CudaDriver final : public Driver {
 public:
  CudaDriver(void* lib, Api api);
  ~CudaDriver() override;

  gen::cuda::Api& cuda() override { return table_; }
  Result<void*> Library(Domain library) override { return libraries_.Get(library); }
  Result<Activity*> activity() override;

  const char* name() const override { return "cuda"; }
  bool emulated() const override { return false; }
  int DriverVersion() override;
  std::string KernelDriverVersion() override;  // /proc/driver/nvidia/version

  Status Check(CUresult r, const char* what);

  Result<int> DeviceCount() override;

  Result<DeviceDescription> Describe(int device) override;

  Status SetDevice(int device) override;

  void* CurrentContext() override;
  Status SetCaptureMode(int mode) override;

  // The driver API has no per-context footprint query: NVML's per-process figure is used.
  Result<uint64_t> ProcessMemory(int device) override;

  Result<MemoryInfo> MemGetInfo() override;

  Result<DevPtr> MemAlloc(size_t bytes) override;
  Status MemFree(DevPtr p) override;  // cuda_driver_place.cc
  Status MemPlace(const std::vector<std::pair<DevPtr, uint64_t>>& allocations) override;
  Result<uint64_t> PlacementGranularity() override;

  Status MemcpyHtoD(DevPtr dst, const void* src, size_t n, DStream s) override;
  Status MemcpyDtoH(void* dst, DevPtr src, size_t n, DStream s) override;
  Status MemcpyDtoD(DevPtr dst, DevPtr src, size_t n, DStream s) override;
  Status Memset8(DevPtr dst, uint8_t v, size_t n, DStream s) override;

  // Remora's own pinned buffers (bounce buffers, spills) are allocated and freed even while
  // the application captures in global mode, which the driver would refuse the worker's thread:
  // the thread is relaxed for the call and its mode restored after.
  Result<void*> HostAlloc(size_t bytes) override;
  void HostFree(void* p) override;
  Status HostRegister(void* p, size_t bytes) override;
  void HostUnregister(void* p) override { api_.cuMemHostUnregister(p); }
  void HostUnregisterAndUnmap(void* p, size_t bytes) override {
    HostUnregister(p);
    ::munmap(p, bytes);
  }
  Result<DevPtr> HostDevicePointer(void* p) override;

  Result<DStream> StreamCreate(unsigned flags, int priority) override;
  Status StreamDestroy(DStream s) override { return Check(api_.cuStreamDestroy(static_cast<CUstream>(s)), "cuStreamDestroy"); }
  Status StreamQuery(DStream s) override { return Check(api_.cuStreamQuery(static_cast<CUstream>(s)), "cuStreamQuery"); }
  Status StreamSynchronize(DStream s) override;
  Status StreamWaitEvent(DStream s, DEvent e, unsigned flags) override;
  Result<bool> StreamCapturing(DStream s) override;

  Result<DEvent> EventCreate(unsigned flags) override;
  // CUDA IPC: the real driver's handles, opened by a sibling worker process on the same GPU.
  Result<IpcShare> IpcExportMemory(DevPtr base, uint64_t) override;
  Result<DevPtr> IpcOpenMemory(const IpcShare& share, uint64_t) override;
  Status IpcCloseMemory(DevPtr p) override { return Check(api_.cuIpcCloseMemHandle(p), "cuIpcCloseMemHandle"); }
  Result<IpcShare> IpcExportEvent(DEvent e) override;
  Result<DEvent> IpcOpenEvent(const IpcShare& share) override;
  // Pools shared by POSIX descriptor; their allocations by the driver's export data.
  Result<IpcShare> MemPoolExport(DPool pool) override;
  Result<DPool> MemPoolImport(const IpcShare& share) override;
  Result<IpcShare> MemPoolExportPointer(DevPtr p, uint64_t) override;
  Result<DevPtr> MemPoolImportPointer(DPool pool, const IpcShare& share, uint64_t) override;
  Status EventDestroy(DEvent e) override { return Check(api_.cuEventDestroy(static_cast<CUevent>(e)), "cuEventDestroy"); }
  Status EventRecord(DEvent e, DStream s) override;
  Status EventQuery(DEvent e) override { return Check(api_.cuEventQuery(static_cast<CUevent>(e)), "cuEventQuery"); }
  Status EventSynchronize(DEvent e) override;
  Result<float> EventElapsedMs(DEvent a, DEvent b) override;

  Status LaunchHostFunc(DStream s, void (*fn)(void*), void* arg) override;

  // ---- modules and kernels ----
  Result<DModule> ModuleLoad(const void* image, size_t) override;
  Status ModuleUnload(DModule m) override { return Check(api_.cuModuleUnload(static_cast<CUmodule>(m)), "cuModuleUnload"); }
  Status Link(const std::vector<LinkInput>& inputs, const std::vector<LinkOption>& options, LinkOutput* out) override;
  Result<DFunction> ModuleGetFunction(DModule m, const char* name) override;
  Result<std::vector<std::string>> ModuleKernelNames(DModule m) override;
  Result<std::pair<DevPtr, size_t>> ModuleGetGlobal(DModule m, const char* name, size_t) override;
  bool GlobalIsManaged(DModule m, const char* name, DevPtr p) override;
  Result<std::vector<ParamInfo>> FuncParams(DFunction f) override;
  Result<int> FuncGetAttribute(DFunction f, int attribute) override;
  static CUlaunchConfig ToDriver(const LaunchConfig& c, std::vector<CUlaunchAttribute>* attrs);
  Status Launch(DFunction f, const LaunchConfig& c) override;

  // ---- more memory ----
  Result<std::pair<DevPtr, size_t>> MemAllocPitch(size_t width, size_t height) override;
  Status Copy3D(const CopySide& dst, const CopySide& src, uint64_t width, uint64_t height, uint64_t depth, DStream s) override;
  Status Memset2D8(DevPtr dst, size_t pitch, uint8_t value, size_t width, size_t height, DStream s) override;
  Result<DevPtr> MemAllocAsync(size_t bytes, DPool pool, DStream s) override;
  Status MemFreeAsync(DevPtr p, DStream s) override { return Check(api_.cuMemFreeAsync(p, static_cast<CUstream>(s)), "cuMemFreeAsync"); }
  Result<DPool> DefaultMemPool(int device) override;
  Result<DPool> GetMemPool(int device) override;
  Status SetMemPool(int device, DPool pool) override;
  Result<DPool> MemPoolCreate(int device, uint64_t max_size, unsigned handle_types) override;
  Status MemPoolDestroy(DPool pool) override { return Check(api_.cuMemPoolDestroy(static_cast<CUmemoryPool>(pool)), "cuMemPoolDestroy"); }
  static bool IntPoolAttribute(int a);
  Status MemPoolSetAttribute(DPool pool, int a, uint64_t value) override;
  Result<uint64_t> MemPoolGetAttribute(DPool pool, int a) override;
  Status MemPoolTrimTo(DPool pool, size_t keep) override;
  Status MemcpyPeer(DevPtr dst, int dst_device, DevPtr src, int src_device, size_t n, DStream s) override;
  Result<bool> CanAccessPeer(int device, int peer) override;
  Status EnablePeerAccess(int peer) override;
  Status DisablePeerAccess(int peer) override;
  Result<uint64_t> GetLimit(int limit) override;
  Status SetLimit(int limit, uint64_t value) override;
  Result<std::pair<int, int>> StreamPriorityRange() override;

 private:
  void* lib_;
  Api api_;
  std::vector<CUcontext> contexts_;
  gen::cuda::DlApi table_;
  CudaLibraries libraries_;
  std::unique_ptr<Activity> activity_;  // CUPTI, once asked for (before the libraries go)
  int current_ = -1;
  bool nvml_tried_ = false;
  // Memory placed at given addresses (MemPlace): extents by base, and each placed
  // allocation's extent.
  struct Placed {
    uint64_t size = 0;
    CUmemGenericAllocationHandle handle = 0;
    int refs = 0;
  };
  std::map<DevPtr, Placed> placed_;
  std::map<DevPtr, DevPtr> placed_allocations_;
  std::unique_ptr<NvmlProbe> nvml_;  // null where NVML is unavailable
};

}  // namespace remora::worker::cuda_backend
