// The real backend: the CUDA driver API, loaded at run time (dlopen("libcuda.so.1") and
// cuGetProcAddress, as NCCL does), so the worker binary starts on machines without a
// driver and says clearly why --backend cuda cannot work there.
#include <cuda.h>
#include <dlfcn.h>

#include <cstring>

#include "remora/base/log.h"
#include "remora/base/util.h"
#include "worker/driver.h"

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
  X(cuMemHostRegister) X(cuMemHostUnregister) X(cuStreamCreateWithPriority)              \
  X(cuStreamDestroy) X(cuStreamQuery) X(cuStreamWaitEvent) X(cuEventCreate)              \
  X(cuEventDestroy) X(cuEventRecord) X(cuEventQuery) X(cuEventElapsedTime)

struct Api {
#define REMORA_DECLARE(name) decltype(&::name) name = nullptr;
  REMORA_CUDA_FUNCTIONS(REMORA_DECLARE)
#undef REMORA_DECLARE
};

using GetProcAddressFn = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

class CudaDriver final : public Driver {
 public:
  CudaDriver(void* lib, Api api) : lib_(lib), api_(api) {}
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

  // Not measured yet: the driver API has no per-context footprint query.
  uint64_t ContextOverhead() override { return 0; }

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

  Result<void*> HostAlloc(size_t bytes) override {
    void* p = nullptr;
    RETURN_IF_ERROR(Check(api_.cuMemHostAlloc(&p, bytes, CU_MEMHOSTALLOC_PORTABLE), "cuMemHostAlloc"));
    return p;
  }
  void HostFree(void* p) override { api_.cuMemFreeHost(p); }
  Status HostRegister(void* p, size_t bytes) override {
    return Check(api_.cuMemHostRegister(p, bytes, CU_MEMHOSTREGISTER_PORTABLE), "cuMemHostRegister");
  }
  void HostUnregister(void* p) override { api_.cuMemHostUnregister(p); }

  Result<DStream> StreamCreate(unsigned flags, int priority) override {
    CUstream s = nullptr;
    RETURN_IF_ERROR(Check(api_.cuStreamCreateWithPriority(&s, flags, priority), "cuStreamCreateWithPriority"));
    return static_cast<DStream>(s);
  }
  Status StreamDestroy(DStream s) override { return Check(api_.cuStreamDestroy(static_cast<CUstream>(s)), "cuStreamDestroy"); }
  Status StreamQuery(DStream s) override { return Check(api_.cuStreamQuery(static_cast<CUstream>(s)), "cuStreamQuery"); }
  Status StreamWaitEvent(DStream s, DEvent e, unsigned flags) override {
    return Check(api_.cuStreamWaitEvent(static_cast<CUstream>(s), static_cast<CUevent>(e), flags), "cuStreamWaitEvent");
  }

  Result<DEvent> EventCreate(unsigned flags) override {
    CUevent e = nullptr;
    RETURN_IF_ERROR(Check(api_.cuEventCreate(&e, flags), "cuEventCreate"));
    return static_cast<DEvent>(e);
  }
  Status EventDestroy(DEvent e) override { return Check(api_.cuEventDestroy(static_cast<CUevent>(e)), "cuEventDestroy"); }
  Status EventRecord(DEvent e, DStream s) override {
    return Check(api_.cuEventRecord(static_cast<CUevent>(e), static_cast<CUstream>(s)), "cuEventRecord");
  }
  Status EventQuery(DEvent e) override { return Check(api_.cuEventQuery(static_cast<CUevent>(e)), "cuEventQuery"); }
  Result<float> EventElapsedMs(DEvent a, DEvent b) override {
    float ms = 0;
    RETURN_IF_ERROR(Check(api_.cuEventElapsedTime(&ms, static_cast<CUevent>(a), static_cast<CUevent>(b)), "cuEventElapsedTime"));
    return ms;
  }

 private:
  void* lib_;
  Api api_;
  std::vector<CUcontext> contexts_;
  int current_ = -1;
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
