// The real backend: the CUDA driver API, loaded at run time (dlopen("libcuda.so.1") and
// cuGetProcAddress, as NCCL does), so the worker binary starts on machines without a
// driver and says clearly why --backend cuda cannot work there.
#include <cuda.h>
#include <dlfcn.h>

#include <cstring>

#include "remora/base/log.h"
#include "remora/base/util.h"
#include "cuda_api.h"
#include "worker/cuda_libraries.h"
#include "worker/driver.h"
#include "worker/nvml.h"

namespace remora::worker {
namespace {

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
  X(cuModuleGetGlobal) X(cuModuleGetFunctionCount) X(cuModuleEnumerateFunctions) X(cuFuncGetName) X(cuFuncGetParamInfo) X(cuFuncGetAttribute) X(cuFuncSetAttribute)   \
  X(cuFuncSetCacheConfig) X(cuLaunchKernel) X(cuLaunchKernelEx) X(cuLaunchCooperativeKernel) \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags) X(cuOccupancyAvailableDynamicSMemPerBlock) \
  X(cuOccupancyMaxActiveClusters) X(cuOccupancyMaxPotentialClusterSize) X(cuMemAllocPitch) X(cuMemcpy3DAsync) X(cuMemsetD2D8Async) \
  X(cuMemAllocAsync) X(cuMemAllocFromPoolAsync) X(cuMemFreeAsync) X(cuDeviceGetDefaultMemPool) \
  X(cuDeviceGetMemPool) X(cuDeviceSetMemPool) X(cuMemPoolCreate) X(cuMemPoolDestroy)        \
  X(cuMemPoolSetAttribute) X(cuMemPoolGetAttribute) X(cuMemPoolTrimTo) X(cuMemcpyPeerAsync) \
  X(cuDeviceCanAccessPeer) X(cuCtxEnablePeerAccess) X(cuCtxDisablePeerAccess) X(cuCtxGetLimit) \
  X(cuCtxSetLimit) X(cuCtxGetStreamPriorityRange) X(cuThreadExchangeStreamCaptureMode) X(cuLinkCreate) X(cuLinkAddData) \
  X(cuLinkComplete) X(cuLinkDestroy) X(cuIpcGetMemHandle) X(cuIpcOpenMemHandle) X(cuIpcCloseMemHandle)      \
  X(cuIpcGetEventHandle) X(cuIpcOpenEventHandle) X(cuMemPoolExportToShareableHandle)                   \
  X(cuMemPoolImportFromShareableHandle) X(cuMemPoolExportPointer) X(cuMemPoolImportPointer)

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

class CudaDriver final : public Driver {
 public:
  CudaDriver(void* lib, Api api) : lib_(lib), api_(api) {
    // The generated calls' table: every function by its exported name. One this driver
    // lacks answers CUDA_ERROR_NOT_SUPPORTED.
    std::vector<std::string> missing = table_.Load([lib](const char* name) { return ::dlsym(lib, name); });
    if (!missing.empty()) LOG_INFO("this NVIDIA driver lacks {} function(s) clients may call, e.g. {}", missing.size(), missing[0]);
  }

  gen::cuda::Api& cuda() override { return table_; }
  Result<void*> Library(Domain library) override { return libraries_.Get(library); }
  ~CudaDriver() override {
    for (size_t i = 0; i < contexts_.size(); i++)
      if (contexts_[i] != nullptr) api_.cuDevicePrimaryCtxRelease(static_cast<CUdevice>(i));
    // The library stays loaded: the driver's own threads may still be winding down.
    (void)lib_;
  }

  const char* name() const override { return "cuda"; }
  bool emulated() const override { return false; }
  int DriverVersion() override {
    int v = 0;
    api_.cuDriverGetVersion(&v);
    return v;
  }

  Status Check(CUresult r, const char* what) {
    if (r == CUDA_SUCCESS) return Status::Ok();
    const char* n = nullptr;
    const char* s = nullptr;
    api_.cuGetErrorName(r, &n);
    api_.cuGetErrorString(r, &s);
    // Driver and runtime error numbers coincide for every code the driver returns here.
    return Status(static_cast<Err>(r), fmt::format("{}: {} ({})", what, n ? n : "?", s ? s : "?"));
  }

  Result<int> DeviceCount() override {
    int n = 0;
    RETURN_IF_ERROR(Check(api_.cuDeviceGetCount(&n), "cuDeviceGetCount"));
    return n;
  }

  Result<DeviceDescription> Describe(int device) override {
    CUdevice dev;
    RETURN_IF_ERROR(Check(api_.cuDeviceGet(&dev, device), "cuDeviceGet"));
    DeviceDescription d;
    char name[256] = {};
    RETURN_IF_ERROR(Check(api_.cuDeviceGetName(name, sizeof(name) - 1, dev), "cuDeviceGetName"));
    d.name = name;
    CUuuid uuid;
    RETURN_IF_ERROR(Check(api_.cuDeviceGetUuid(&uuid, dev), "cuDeviceGetUuid"));
    std::memcpy(d.uuid, uuid.bytes, 16);
    size_t total = 0;
    RETURN_IF_ERROR(Check(api_.cuDeviceTotalMem(&total, dev), "cuDeviceTotalMem"));
    d.total_memory = total;
    char bus[32] = {};
    if (api_.cuDeviceGetPCIBusId(bus, sizeof(bus) - 1, dev) == CUDA_SUCCESS) d.pci_bus_id = bus;
    d.attributes.assign(kNumDeviceAttributes, 0);
    for (int a = 1; a < kNumDeviceAttributes; a++) {
      int v = 0;
      // Attributes this driver does not know stay 0.
      if (api_.cuDeviceGetAttribute(&v, static_cast<CUdevice_attribute>(a), dev) == CUDA_SUCCESS) d.attributes[size_t(a)] = v;
    }
    return d;
  }

  Status SetDevice(int device) override {
    if (device < 0) return Error(Err::kInvalidDevice, "invalid device {}", device);
    if (static_cast<size_t>(device) >= contexts_.size()) {
      contexts_.resize(static_cast<size_t>(device) + 1, nullptr);
    }
    CUcontext& ctx = contexts_[static_cast<size_t>(device)];
    if (ctx == nullptr) {
      CUdevice dev;
      RETURN_IF_ERROR(Check(api_.cuDeviceGet(&dev, device), "cuDeviceGet"));
      RETURN_IF_ERROR(Check(api_.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain"));
      RETURN_IF_ERROR(Check(api_.cuCtxSetCurrent(ctx), "cuCtxSetCurrent"));
      current_ = device;
      return Status::Ok();
    }
    if (current_ != device) {
      RETURN_IF_ERROR(Check(api_.cuCtxSetCurrent(ctx), "cuCtxSetCurrent"));
      current_ = device;
    }
    return Status::Ok();
  }

  void* CurrentContext() override {
    return current_ >= 0 && static_cast<size_t>(current_) < contexts_.size() ? contexts_[static_cast<size_t>(current_)] : nullptr;
  }
  Status SetCaptureMode(int mode) override {
    auto m = static_cast<CUstreamCaptureMode>(mode);
    return Check(api_.cuThreadExchangeStreamCaptureMode(&m), "cuThreadExchangeStreamCaptureMode");
  }

  // The driver API has no per-context footprint query: NVML's per-process figure is used.
  Result<uint64_t> ProcessMemory(int device) override {
    if (!nvml_tried_) {
      nvml_tried_ = true;
      auto n = NvmlProbe::Load();
      if (n.ok()) nvml_ = std::move(*n);
      else LOG_INFO("context overhead is not measured: {}", n.status().message());
    }
    if (!nvml_) return Error(Err::kNotSupported, "NVML is unavailable");
    CUdevice dev;
    RETURN_IF_ERROR(Check(api_.cuDeviceGet(&dev, device), "cuDeviceGet"));
    char bus[32] = {};
    RETURN_IF_ERROR(Check(api_.cuDeviceGetPCIBusId(bus, sizeof(bus) - 1, dev), "cuDeviceGetPCIBusId"));
    return nvml_->ProcessMemory(bus);
  }

  Result<MemoryInfo> MemGetInfo() override {
    size_t f = 0, t = 0;
    RETURN_IF_ERROR(Check(api_.cuMemGetInfo(&f, &t), "cuMemGetInfo"));
    return MemoryInfo{f, t};
  }

  Result<DevPtr> MemAlloc(size_t bytes) override {
    CUdeviceptr p = 0;
    RETURN_IF_ERROR(Check(api_.cuMemAlloc(&p, bytes), "cuMemAlloc"));
    return static_cast<DevPtr>(p);
  }
  Status MemFree(DevPtr p) override { return Check(api_.cuMemFree(static_cast<CUdeviceptr>(p)), "cuMemFree"); }

  Status MemcpyHtoD(DevPtr dst, const void* src, size_t n, DStream s) override {
    return Check(api_.cuMemcpyHtoDAsync(dst, src, n, static_cast<CUstream>(s)), "cuMemcpyHtoDAsync");
  }
  Status MemcpyDtoH(void* dst, DevPtr src, size_t n, DStream s) override {
    return Check(api_.cuMemcpyDtoHAsync(dst, src, n, static_cast<CUstream>(s)), "cuMemcpyDtoHAsync");
  }
  Status MemcpyDtoD(DevPtr dst, DevPtr src, size_t n, DStream s) override {
    return Check(api_.cuMemcpyDtoDAsync(dst, src, n, static_cast<CUstream>(s)), "cuMemcpyDtoDAsync");
  }
  Status Memset8(DevPtr dst, uint8_t v, size_t n, DStream s) override {
    return Check(api_.cuMemsetD8Async(dst, v, n, static_cast<CUstream>(s)), "cuMemsetD8Async");
  }

  // Remora's own pinned buffers (bounce buffers, spills) are allocated and freed even while
  // the application captures in global mode, which the driver would refuse the worker's thread:
  // the thread is relaxed for the call and its mode restored after.
  Result<void*> HostAlloc(size_t bytes) override {
    RelaxedCapture relaxed(api_);
    void* p = nullptr;
    RETURN_IF_ERROR(Check(api_.cuMemHostAlloc(&p, bytes, CU_MEMHOSTALLOC_PORTABLE), "cuMemHostAlloc"));
    return p;
  }
  void HostFree(void* p) override {
    RelaxedCapture relaxed(api_);
    api_.cuMemFreeHost(p);
  }
  Status HostRegister(void* p, size_t bytes) override {
    return Check(api_.cuMemHostRegister(p, bytes, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP),
                 "cuMemHostRegister");
  }
  void HostUnregister(void* p) override { api_.cuMemHostUnregister(p); }
  Result<DevPtr> HostDevicePointer(void* p) override {
    CUdeviceptr d = 0;
    RETURN_IF_ERROR(Check(api_.cuMemHostGetDevicePointer(&d, p, 0), "cuMemHostGetDevicePointer"));
    return static_cast<DevPtr>(d);
  }

  Result<DStream> StreamCreate(unsigned flags, int priority) override {
    CUstream s = nullptr;
    RETURN_IF_ERROR(Check(api_.cuStreamCreateWithPriority(&s, flags, priority), "cuStreamCreateWithPriority"));
    return static_cast<DStream>(s);
  }
  Status StreamDestroy(DStream s) override { return Check(api_.cuStreamDestroy(static_cast<CUstream>(s)), "cuStreamDestroy"); }
  Status StreamQuery(DStream s) override { return Check(api_.cuStreamQuery(static_cast<CUstream>(s)), "cuStreamQuery"); }
  Status StreamSynchronize(DStream s) override {
    return Check(api_.cuStreamSynchronize(static_cast<CUstream>(s)), "cuStreamSynchronize");
  }
  Status StreamWaitEvent(DStream s, DEvent e, unsigned flags) override {
    return Check(api_.cuStreamWaitEvent(static_cast<CUstream>(s), static_cast<CUevent>(e), flags), "cuStreamWaitEvent");
  }
  Result<bool> StreamCapturing(DStream s) override {
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    RETURN_IF_ERROR(Check(api_.cuStreamIsCapturing(static_cast<CUstream>(s), &status), "cuStreamIsCapturing"));
    return status != CU_STREAM_CAPTURE_STATUS_NONE;
  }

  Result<DEvent> EventCreate(unsigned flags) override {
    CUevent e = nullptr;
    RETURN_IF_ERROR(Check(api_.cuEventCreate(&e, flags), "cuEventCreate"));
    return static_cast<DEvent>(e);
  }
  // CUDA IPC: the real driver's handles, opened by a sibling worker process on the same GPU.
  Result<IpcShare> IpcExportMemory(DevPtr base, uint64_t) override {
    CUipcMemHandle h;
    RETURN_IF_ERROR(Check(api_.cuIpcGetMemHandle(&h, base), "cuIpcGetMemHandle"));
    IpcShare s;
    s.handle.assign(reinterpret_cast<const uint8_t*>(&h), reinterpret_cast<const uint8_t*>(&h) + sizeof(h));
    return s;
  }
  Result<DevPtr> IpcOpenMemory(const IpcShare& share, uint64_t) override {
    CUipcMemHandle h;
    if (share.handle.size() != sizeof(h)) return Error(Err::kInvalidResourceHandle, "no driver IPC handle to open");
    std::memcpy(&h, share.handle.data(), sizeof(h));
    CUdeviceptr p = 0;
    RETURN_IF_ERROR(Check(api_.cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), "cuIpcOpenMemHandle"));
    return static_cast<DevPtr>(p);
  }
  Status IpcCloseMemory(DevPtr p) override { return Check(api_.cuIpcCloseMemHandle(p), "cuIpcCloseMemHandle"); }
  Result<IpcShare> IpcExportEvent(DEvent e) override {
    CUipcEventHandle h;
    RETURN_IF_ERROR(Check(api_.cuIpcGetEventHandle(&h, static_cast<CUevent>(e)), "cuIpcGetEventHandle"));
    IpcShare s;
    s.handle.assign(reinterpret_cast<const uint8_t*>(&h), reinterpret_cast<const uint8_t*>(&h) + sizeof(h));
    return s;
  }
  Result<DEvent> IpcOpenEvent(const IpcShare& share) override {
    CUipcEventHandle h;
    if (share.handle.size() != sizeof(h)) return Error(Err::kInvalidResourceHandle, "no driver IPC handle to open");
    std::memcpy(&h, share.handle.data(), sizeof(h));
    CUevent e = nullptr;
    RETURN_IF_ERROR(Check(api_.cuIpcOpenEventHandle(&e, h), "cuIpcOpenEventHandle"));
    return static_cast<DEvent>(e);
  }
  // Pools shared by POSIX descriptor; their allocations by the driver's export data.
  Result<IpcShare> MemPoolExport(DPool pool) override {
    int fd = -1;
    RETURN_IF_ERROR(Check(api_.cuMemPoolExportToShareableHandle(&fd, static_cast<CUmemoryPool>(pool),
                                                                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                          "cuMemPoolExportToShareableHandle"));
    IpcShare s;
    s.fd = Fd(fd);
    return s;
  }
  Result<DPool> MemPoolImport(const IpcShare& share) override {
    if (!share.fd) return Error(Err::kInvalidResourceHandle, "no pool descriptor to import");
    CUmemoryPool pool = nullptr;
    RETURN_IF_ERROR(Check(api_.cuMemPoolImportFromShareableHandle(
                              &pool, reinterpret_cast<void*>(static_cast<intptr_t>(share.fd.get())),
                              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                          "cuMemPoolImportFromShareableHandle"));
    return static_cast<DPool>(pool);
  }
  Result<IpcShare> MemPoolExportPointer(DevPtr p, uint64_t) override {
    CUmemPoolPtrExportData data;
    RETURN_IF_ERROR(Check(api_.cuMemPoolExportPointer(&data, p), "cuMemPoolExportPointer"));
    IpcShare s;
    s.handle.assign(reinterpret_cast<const uint8_t*>(&data), reinterpret_cast<const uint8_t*>(&data) + sizeof(data));
    return s;
  }
  Result<DevPtr> MemPoolImportPointer(DPool pool, const IpcShare& share, uint64_t) override {
    CUmemPoolPtrExportData data;
    if (share.handle.size() != sizeof(data)) return Error(Err::kInvalidResourceHandle, "no pool pointer export data");
    std::memcpy(&data, share.handle.data(), sizeof(data));
    CUdeviceptr p = 0;
    RETURN_IF_ERROR(Check(api_.cuMemPoolImportPointer(&p, static_cast<CUmemoryPool>(pool), &data), "cuMemPoolImportPointer"));
    return static_cast<DevPtr>(p);
  }
  Status EventDestroy(DEvent e) override { return Check(api_.cuEventDestroy(static_cast<CUevent>(e)), "cuEventDestroy"); }
  Status EventRecord(DEvent e, DStream s) override {
    return Check(api_.cuEventRecord(static_cast<CUevent>(e), static_cast<CUstream>(s)), "cuEventRecord");
  }
  Status EventQuery(DEvent e) override { return Check(api_.cuEventQuery(static_cast<CUevent>(e)), "cuEventQuery"); }
  Status EventSynchronize(DEvent e) override {
    return Check(api_.cuEventSynchronize(static_cast<CUevent>(e)), "cuEventSynchronize");
  }
  Result<float> EventElapsedMs(DEvent a, DEvent b) override {
    float ms = 0;
    RETURN_IF_ERROR(Check(api_.cuEventElapsedTime(&ms, static_cast<CUevent>(a), static_cast<CUevent>(b)), "cuEventElapsedTime"));
    return ms;
  }

  Status LaunchHostFunc(DStream s, void (*fn)(void*), void* arg) override {
    return Check(api_.cuLaunchHostFunc(static_cast<CUstream>(s), fn, arg), "cuLaunchHostFunc");
  }

  // ---- modules and kernels ----
  Result<DModule> ModuleLoad(const void* image, size_t) override {
    CUmodule m = nullptr;
    RETURN_IF_ERROR(Check(api_.cuModuleLoadData(&m, image), "cuModuleLoadData"));
    return static_cast<DModule>(m);
  }
  Status ModuleUnload(DModule m) override { return Check(api_.cuModuleUnload(static_cast<CUmodule>(m)), "cuModuleUnload"); }
  Status Link(const std::vector<LinkInput>& inputs, const std::vector<LinkOption>& options, LinkOutput* out) override {
    // The caller's numeric options, then the logs and the wall time, which come back.
    constexpr size_t kLog = 64 * 1024;
    std::vector<char> info(kLog, '\0'), error(kLog, '\0');
    float walltime = 0;
    std::vector<CUjit_option> keys;
    std::vector<void*> values;
    for (const LinkOption& o : options) {
      keys.push_back(static_cast<CUjit_option>(o.option));
      values.push_back(reinterpret_cast<void*>(static_cast<uintptr_t>(o.value)));
    }
    auto add = [&](CUjit_option k, void* v) {
      keys.push_back(k);
      values.push_back(v);
    };
    add(CU_JIT_INFO_LOG_BUFFER, info.data());
    add(CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, reinterpret_cast<void*>(kLog - 1));
    add(CU_JIT_ERROR_LOG_BUFFER, error.data());
    add(CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, reinterpret_cast<void*>(kLog - 1));
    add(CU_JIT_WALL_TIME, &walltime);
    CUlinkState state = nullptr;
    RETURN_IF_ERROR(Check(api_.cuLinkCreate(static_cast<unsigned>(keys.size()), keys.data(), values.data(), &state), "cuLinkCreate"));
    Status st;
    for (const LinkInput& in : inputs) {
      std::vector<CUjit_option> ik;
      std::vector<void*> iv;
      for (const LinkOption& o : in.options) {
        ik.push_back(static_cast<CUjit_option>(o.option));
        iv.push_back(reinterpret_cast<void*>(static_cast<uintptr_t>(o.value)));
      }
      st = Check(api_.cuLinkAddData(state, static_cast<CUjitInputType>(in.type), const_cast<void*>(in.data), in.size,
                                    in.name.c_str(), static_cast<unsigned>(ik.size()), ik.data(), iv.data()),
                 "cuLinkAddData");
      if (!st.ok()) break;
    }
    if (st.ok()) {
      void* cubin = nullptr;
      size_t size = 0;
      st = Check(api_.cuLinkComplete(state, &cubin, &size), "cuLinkComplete");
      // The image belongs to the link state: copy it before destroying that.
      if (st.ok()) out->image.assign(static_cast<const std::byte*>(cubin), static_cast<const std::byte*>(cubin) + size);
    }
    out->info_log = info.data();
    out->error_log = error.data();
    out->walltime_ms = walltime;
    (void)api_.cuLinkDestroy(state);
    return st;
  }
  Result<DFunction> ModuleGetFunction(DModule m, const char* name) override {
    CUfunction f = nullptr;
    RETURN_IF_ERROR(Check(api_.cuModuleGetFunction(&f, static_cast<CUmodule>(m), name), "cuModuleGetFunction"));
    return static_cast<DFunction>(f);
  }
  Result<std::vector<std::string>> ModuleKernelNames(DModule m) override {
    unsigned count = 0;
    RETURN_IF_ERROR(Check(api_.cuModuleGetFunctionCount(&count, static_cast<CUmodule>(m)), "cuModuleGetFunctionCount"));
    std::vector<CUfunction> fns(count);
    if (count > 0)
      RETURN_IF_ERROR(Check(api_.cuModuleEnumerateFunctions(fns.data(), count, static_cast<CUmodule>(m)), "cuModuleEnumerateFunctions"));
    std::vector<std::string> names;
    for (CUfunction f : fns) {
      const char* name = nullptr;
      RETURN_IF_ERROR(Check(api_.cuFuncGetName(&name, f), "cuFuncGetName"));
      names.emplace_back(name != nullptr ? name : "");
    }
    return names;
  }
  Result<std::pair<DevPtr, size_t>> ModuleGetGlobal(DModule m, const char* name, size_t) override {
    CUdeviceptr p = 0;
    size_t n = 0;
    RETURN_IF_ERROR(Check(api_.cuModuleGetGlobal(&p, &n, static_cast<CUmodule>(m), name), "cuModuleGetGlobal"));
    return std::make_pair(static_cast<DevPtr>(p), n);
  }
  Result<std::vector<ParamInfo>> FuncParams(DFunction f) override {
    std::vector<ParamInfo> out;
    for (size_t i = 0;; i++) {
      size_t off = 0, size = 0;
      // The driver answers CUDA_ERROR_INVALID_VALUE past the last parameter.
      if (api_.cuFuncGetParamInfo(static_cast<CUfunction>(f), i, &off, &size) != CUDA_SUCCESS) break;
      out.push_back(ParamInfo{static_cast<uint32_t>(off), static_cast<uint32_t>(size)});
    }
    return out;
  }
  Result<int> FuncGetAttribute(DFunction f, int attribute) override {
    int v = 0;
    RETURN_IF_ERROR(Check(api_.cuFuncGetAttribute(&v, static_cast<CUfunction_attribute>(attribute), static_cast<CUfunction>(f)), "cuFuncGetAttribute"));
    return v;
  }
  Status FuncSetAttribute(DFunction f, int attribute, int value) override {
    return Check(api_.cuFuncSetAttribute(static_cast<CUfunction>(f), static_cast<CUfunction_attribute>(attribute), value), "cuFuncSetAttribute");
  }
  Status FuncSetCacheConfig(DFunction f, int config) override {
    return Check(api_.cuFuncSetCacheConfig(static_cast<CUfunction>(f), static_cast<CUfunc_cache>(config)), "cuFuncSetCacheConfig");
  }
  static CUlaunchConfig ToDriver(const LaunchConfig& c, std::vector<CUlaunchAttribute>* attrs) {
    CUlaunchConfig lc = {};
    lc.gridDimX = c.grid[0];
    lc.gridDimY = c.grid[1];
    lc.gridDimZ = c.grid[2];
    lc.blockDimX = c.block[0];
    lc.blockDimY = c.block[1];
    lc.blockDimZ = c.block[2];
    lc.sharedMemBytes = c.shared_mem;
    lc.hStream = static_cast<CUstream>(c.stream);
    for (const LaunchAttr& a : c.attrs) {
      CUlaunchAttribute d = {};
      d.id = static_cast<CUlaunchAttributeID>(a.id);
      static_assert(sizeof(d.value) == sizeof(a.value));
      std::memcpy(&d.value, a.value, sizeof(a.value));
      attrs->push_back(d);
    }
    if (c.cooperative) {
      CUlaunchAttribute d = {};
      d.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
      d.value.cooperative = 1;
      attrs->push_back(d);
    }
    lc.attrs = attrs->data();
    lc.numAttrs = static_cast<unsigned>(attrs->size());
    return lc;
  }
  Status Launch(DFunction f, const LaunchConfig& c) override {
    if (c.attrs.empty() && !c.cooperative)
      return Check(api_.cuLaunchKernel(static_cast<CUfunction>(f), c.grid[0], c.grid[1], c.grid[2], c.block[0],
                                       c.block[1], c.block[2], c.shared_mem, static_cast<CUstream>(c.stream), c.params,
                                       nullptr), "cuLaunchKernel");
    std::vector<CUlaunchAttribute> attrs;
    CUlaunchConfig lc = ToDriver(c, &attrs);
    return Check(api_.cuLaunchKernelEx(&lc, static_cast<CUfunction>(f), c.params, nullptr), "cuLaunchKernelEx");
  }
  Result<int> OccupancyMaxActiveBlocks(DFunction f, int block_size, size_t smem, unsigned flags) override {
    int n = 0;
    RETURN_IF_ERROR(Check(api_.cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&n, static_cast<CUfunction>(f), block_size, smem, flags),
                          "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags"));
    return n;
  }
  Result<size_t> OccupancyAvailableDynamicSmem(DFunction f, int num_blocks, int block_size) override {
    size_t n = 0;
    RETURN_IF_ERROR(Check(api_.cuOccupancyAvailableDynamicSMemPerBlock(&n, static_cast<CUfunction>(f), num_blocks, block_size),
                          "cuOccupancyAvailableDynamicSMemPerBlock"));
    return n;
  }
  Result<int> OccupancyMaxActiveClusters(DFunction f, const LaunchConfig& c) override {
    std::vector<CUlaunchAttribute> attrs;
    CUlaunchConfig lc = ToDriver(c, &attrs);
    int n = 0;
    RETURN_IF_ERROR(Check(api_.cuOccupancyMaxActiveClusters(&n, static_cast<CUfunction>(f), &lc), "cuOccupancyMaxActiveClusters"));
    return n;
  }

  Result<int> OccupancyMaxPotentialClusterSize(DFunction f, const LaunchConfig& c) override {
    std::vector<CUlaunchAttribute> attrs;
    CUlaunchConfig lc = ToDriver(c, &attrs);
    int n = 0;
    RETURN_IF_ERROR(Check(api_.cuOccupancyMaxPotentialClusterSize(&n, static_cast<CUfunction>(f), &lc),
                          "cuOccupancyMaxPotentialClusterSize"));
    return n;
  }

  // ---- more memory ----
  Result<std::pair<DevPtr, size_t>> MemAllocPitch(size_t width, size_t height) override {
    CUdeviceptr p = 0;
    size_t pitch = 0;
    RETURN_IF_ERROR(Check(api_.cuMemAllocPitch(&p, &pitch, width, height, 16), "cuMemAllocPitch"));
    return std::make_pair(static_cast<DevPtr>(p), pitch);
  }
  Status Copy3D(const CopySide& dst, const CopySide& src, uint64_t width, uint64_t height, uint64_t depth, DStream s) override {
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
  Status Memset2D8(DevPtr dst, size_t pitch, uint8_t value, size_t width, size_t height, DStream s) override {
    return Check(api_.cuMemsetD2D8Async(dst, pitch, value, width, height, static_cast<CUstream>(s)), "cuMemsetD2D8Async");
  }
  Result<DevPtr> MemAllocAsync(size_t bytes, DPool pool, DStream s) override {
    CUdeviceptr p = 0;
    if (pool == nullptr) RETURN_IF_ERROR(Check(api_.cuMemAllocAsync(&p, bytes, static_cast<CUstream>(s)), "cuMemAllocAsync"));
    else RETURN_IF_ERROR(Check(api_.cuMemAllocFromPoolAsync(&p, bytes, static_cast<CUmemoryPool>(pool), static_cast<CUstream>(s)), "cuMemAllocFromPoolAsync"));
    return static_cast<DevPtr>(p);
  }
  Status MemFreeAsync(DevPtr p, DStream s) override { return Check(api_.cuMemFreeAsync(p, static_cast<CUstream>(s)), "cuMemFreeAsync"); }
  Result<DPool> DefaultMemPool(int device) override {
    CUmemoryPool p = nullptr;
    RETURN_IF_ERROR(Check(api_.cuDeviceGetDefaultMemPool(&p, device), "cuDeviceGetDefaultMemPool"));
    return static_cast<DPool>(p);
  }
  Result<DPool> GetMemPool(int device) override {
    CUmemoryPool p = nullptr;
    RETURN_IF_ERROR(Check(api_.cuDeviceGetMemPool(&p, device), "cuDeviceGetMemPool"));
    return static_cast<DPool>(p);
  }
  Status SetMemPool(int device, DPool pool) override {
    return Check(api_.cuDeviceSetMemPool(device, static_cast<CUmemoryPool>(pool)), "cuDeviceSetMemPool");
  }
  Result<DPool> MemPoolCreate(int device, uint64_t max_size, unsigned handle_types) override {
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
  Status MemPoolDestroy(DPool pool) override { return Check(api_.cuMemPoolDestroy(static_cast<CUmemoryPool>(pool)), "cuMemPoolDestroy"); }
  static bool IntPoolAttribute(int a) {
    return a == CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES || a == CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC ||
           a == CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES;
  }
  Status MemPoolSetAttribute(DPool pool, int a, uint64_t value) override {
    int iv = static_cast<int>(value);
    cuuint64_t uv = value;
    void* v = IntPoolAttribute(a) ? static_cast<void*>(&iv) : static_cast<void*>(&uv);
    return Check(api_.cuMemPoolSetAttribute(static_cast<CUmemoryPool>(pool), static_cast<CUmemPool_attribute>(a), v), "cuMemPoolSetAttribute");
  }
  Result<uint64_t> MemPoolGetAttribute(DPool pool, int a) override {
    int iv = 0;
    cuuint64_t uv = 0;
    void* v = IntPoolAttribute(a) ? static_cast<void*>(&iv) : static_cast<void*>(&uv);
    RETURN_IF_ERROR(Check(api_.cuMemPoolGetAttribute(static_cast<CUmemoryPool>(pool), static_cast<CUmemPool_attribute>(a), v), "cuMemPoolGetAttribute"));
    return IntPoolAttribute(a) ? static_cast<uint64_t>(iv) : uv;
  }
  Status MemPoolTrimTo(DPool pool, size_t keep) override {
    return Check(api_.cuMemPoolTrimTo(static_cast<CUmemoryPool>(pool), keep), "cuMemPoolTrimTo");
  }
  Status MemcpyPeer(DevPtr dst, int dst_device, DevPtr src, int src_device, size_t n, DStream s) override {
    int cur = current_;  // both contexts must exist; the caller's current device stays current
    RETURN_IF_ERROR(SetDevice(dst_device));
    RETURN_IF_ERROR(SetDevice(src_device));
    RETURN_IF_ERROR(SetDevice(cur));
    CUcontext dctx = contexts_[static_cast<size_t>(dst_device)], sctx = contexts_[static_cast<size_t>(src_device)];
    return Check(api_.cuMemcpyPeerAsync(dst, dctx, src, sctx, n, static_cast<CUstream>(s)), "cuMemcpyPeerAsync");
  }
  Result<bool> CanAccessPeer(int device, int peer) override {
    int can = 0;
    RETURN_IF_ERROR(Check(api_.cuDeviceCanAccessPeer(&can, device, peer), "cuDeviceCanAccessPeer"));
    return can != 0;
  }
  Status EnablePeerAccess(int peer) override {
    int cur = current_;
    RETURN_IF_ERROR(SetDevice(peer));
    RETURN_IF_ERROR(SetDevice(cur));
    return Check(api_.cuCtxEnablePeerAccess(contexts_[static_cast<size_t>(peer)], 0), "cuCtxEnablePeerAccess");
  }
  Status DisablePeerAccess(int peer) override {
    int cur = current_;
    RETURN_IF_ERROR(SetDevice(peer));
    RETURN_IF_ERROR(SetDevice(cur));
    return Check(api_.cuCtxDisablePeerAccess(contexts_[static_cast<size_t>(peer)]), "cuCtxDisablePeerAccess");
  }
  Result<uint64_t> GetLimit(int limit) override {
    size_t v = 0;
    RETURN_IF_ERROR(Check(api_.cuCtxGetLimit(&v, static_cast<CUlimit>(limit)), "cuCtxGetLimit"));
    return static_cast<uint64_t>(v);
  }
  Status SetLimit(int limit, uint64_t value) override {
    return Check(api_.cuCtxSetLimit(static_cast<CUlimit>(limit), value), "cuCtxSetLimit");
  }
  Result<std::pair<int, int>> StreamPriorityRange() override {
    int least = 0, greatest = 0;
    RETURN_IF_ERROR(Check(api_.cuCtxGetStreamPriorityRange(&least, &greatest), "cuCtxGetStreamPriorityRange"));
    return std::make_pair(least, greatest);
  }

 private:
  void* lib_;
  Api api_;
  std::vector<CUcontext> contexts_;
  gen::cuda::DlApi table_;
  CudaLibraries libraries_;
  int current_ = -1;
  bool nvml_tried_ = false;
  std::unique_ptr<NvmlProbe> nvml_;  // null where NVML is unavailable
};

}  // namespace

Result<std::unique_ptr<Driver>> MakeCudaDriver() {
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr)
    return Error(Err::kInitializationError,
                 "--backend cuda: no NVIDIA driver here (dlopen libcuda.so.1: {}); use --backend host for the "
                 "host-emulated backend", ::dlerror());
  auto gpa = reinterpret_cast<GetProcAddressFn>(::dlsym(lib, "cuGetProcAddress_v2"));
  if (gpa == nullptr) return Error(Err::kInitializationError, "libcuda.so.1 is too old: no cuGetProcAddress_v2 (need a CUDA 12+ driver)");
  Api api;
  int version = 13000;
#define REMORA_RESOLVE(name)                                                                       \
  {                                                                                                \
    void* fn = nullptr;                                                                            \
    CUdriverProcAddressQueryResult q;                                                             \
    if (gpa(#name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &q) != CUDA_SUCCESS || fn == nullptr) \
      return Error(Err::kInitializationError, "the NVIDIA driver lacks {} (need a CUDA 13 driver)", #name); \
    api.name = reinterpret_cast<decltype(api.name)>(fn);                                           \
  }
  REMORA_CUDA_FUNCTIONS(REMORA_RESOLVE)
#undef REMORA_RESOLVE
  CUresult r = api.cuInit(0);
  if (r != CUDA_SUCCESS) {
    const char* n = nullptr;
    api.cuGetErrorName(r, &n);
    return Error(Err::kInitializationError, "cuInit failed: {}", n ? n : "?");
  }
  return std::unique_ptr<Driver>(std::make_unique<CudaDriver>(lib, api));
}

}  // namespace remora::worker
