// The real backend: the CUDA driver API, loaded at run time (dlopen("libcuda.so.1") and
// cuGetProcAddress, as NCCL does), so the worker binary starts on machines without a
// driver and says clearly why --backend cuda cannot work there.
//
// This file: loading the driver (MakeCudaDriver), devices, memory, streams and events.
#include <dlfcn.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "worker/backend/cuda/cuda_driver.h"

namespace remora::worker::cuda_backend {

CudaDriver::CudaDriver(void* lib, Api api) : lib_(lib), api_(api) {
  // The generated calls' table: every function by its exported name. One this driver
  // lacks answers CUDA_ERROR_NOT_SUPPORTED.
  std::vector<std::string> missing = table_.Load([lib](const char* name) { return ::dlsym(lib, name); });
  if (!missing.empty()) LOG_INFO("this NVIDIA driver lacks {} function(s) clients may call, e.g. {}", missing.size(), missing[0]);
}

CudaDriver::~CudaDriver() {
  for (size_t i = 0; i < contexts_.size(); i++)
    if (contexts_[i] != nullptr) api_.cuDevicePrimaryCtxRelease(static_cast<CUdevice>(i));
  // The library stays loaded: the driver's own threads may still be winding down.
  (void)lib_;
}

int CudaDriver::DriverVersion() {
  int v = 0;
  api_.cuDriverGetVersion(&v);
  return v;
}

std::string KernelModuleVersion(const std::string& line) {
  size_t at = line.find("Kernel Module");
  if (at == std::string::npos) return {};
  std::istringstream words(line.substr(at));
  std::string w;
  while (words >> w)
    if (w.find('.') != std::string::npos && w.find_first_not_of("0123456789.") == std::string::npos) return w;
  return {};
}

std::string CudaDriver::KernelDriverVersion() {
  std::ifstream f("/proc/driver/nvidia/version");
  std::string line;
  if (!std::getline(f, line)) return {};
  return KernelModuleVersion(line);
}

Status CudaDriver::Check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return Status::Ok();
  const char* n = nullptr;
  const char* s = nullptr;
  api_.cuGetErrorName(r, &n);
  api_.cuGetErrorString(r, &s);
  // Driver and runtime error numbers coincide for every code the driver returns here.
  return Status(static_cast<Err>(r), fmt::format("{}: {} ({})", what, n ? n : "?", s ? s : "?"));
}

Result<int> CudaDriver::DeviceCount() {
  int n = 0;
  RETURN_IF_ERROR(Check(api_.cuDeviceGetCount(&n), "cuDeviceGetCount"));
  return n;
}

Result<DeviceDescription> CudaDriver::Describe(int device) {
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

Status CudaDriver::SetDevice(int device) {
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

void* CudaDriver::CurrentContext() {
  return current_ >= 0 && static_cast<size_t>(current_) < contexts_.size() ? contexts_[static_cast<size_t>(current_)] : nullptr;
}

Status CudaDriver::SetCaptureMode(int mode) {
  auto m = static_cast<CUstreamCaptureMode>(mode);
  return Check(api_.cuThreadExchangeStreamCaptureMode(&m), "cuThreadExchangeStreamCaptureMode");
}

Result<uint64_t> CudaDriver::ProcessMemory(int device) {
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

Result<MemoryInfo> CudaDriver::MemGetInfo() {
  size_t f = 0, t = 0;
  RETURN_IF_ERROR(Check(api_.cuMemGetInfo(&f, &t), "cuMemGetInfo"));
  return MemoryInfo{f, t};
}

Result<DevPtr> CudaDriver::MemAlloc(size_t bytes) {
  CUdeviceptr p = 0;
  RETURN_IF_ERROR(Check(api_.cuMemAlloc(&p, bytes), "cuMemAlloc"));
  return static_cast<DevPtr>(p);
}

Status CudaDriver::MemcpyHtoD(DevPtr dst, const void* src, size_t n, DStream s) {
  return Check(api_.cuMemcpyHtoDAsync(dst, src, n, static_cast<CUstream>(s)), "cuMemcpyHtoDAsync");
}

Status CudaDriver::MemcpyDtoH(void* dst, DevPtr src, size_t n, DStream s) {
  return Check(api_.cuMemcpyDtoHAsync(dst, src, n, static_cast<CUstream>(s)), "cuMemcpyDtoHAsync");
}

Status CudaDriver::MemcpyDtoD(DevPtr dst, DevPtr src, size_t n, DStream s) {
  return Check(api_.cuMemcpyDtoDAsync(dst, src, n, static_cast<CUstream>(s)), "cuMemcpyDtoDAsync");
}

Status CudaDriver::Memset8(DevPtr dst, uint8_t v, size_t n, DStream s) {
  return Check(api_.cuMemsetD8Async(dst, v, n, static_cast<CUstream>(s)), "cuMemsetD8Async");
}

Result<void*> CudaDriver::HostAlloc(size_t bytes) {
  RelaxedCapture relaxed(api_);
  void* p = nullptr;
  RETURN_IF_ERROR(Check(api_.cuMemHostAlloc(&p, bytes, CU_MEMHOSTALLOC_PORTABLE), "cuMemHostAlloc"));
  return p;
}

void CudaDriver::HostFree(void* p) {
  RelaxedCapture relaxed(api_);
  api_.cuMemFreeHost(p);
}

Status CudaDriver::HostRegister(void* p, size_t bytes) {
  return Check(api_.cuMemHostRegister(p, bytes, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP),
               "cuMemHostRegister");
}

Result<DevPtr> CudaDriver::HostDevicePointer(void* p) {
  CUdeviceptr d = 0;
  RETURN_IF_ERROR(Check(api_.cuMemHostGetDevicePointer(&d, p, 0), "cuMemHostGetDevicePointer"));
  return static_cast<DevPtr>(d);
}

Result<DStream> CudaDriver::StreamCreate(unsigned flags, int priority) {
  CUstream s = nullptr;
  RETURN_IF_ERROR(Check(api_.cuStreamCreateWithPriority(&s, flags, priority), "cuStreamCreateWithPriority"));
  return static_cast<DStream>(s);
}

Status CudaDriver::StreamSynchronize(DStream s) {
  return Check(api_.cuStreamSynchronize(static_cast<CUstream>(s)), "cuStreamSynchronize");
}

Status CudaDriver::StreamWaitEvent(DStream s, DEvent e, unsigned flags) {
  return Check(api_.cuStreamWaitEvent(static_cast<CUstream>(s), static_cast<CUevent>(e), flags), "cuStreamWaitEvent");
}

Result<bool> CudaDriver::StreamCapturing(DStream s) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  RETURN_IF_ERROR(Check(api_.cuStreamIsCapturing(static_cast<CUstream>(s), &status), "cuStreamIsCapturing"));
  return status != CU_STREAM_CAPTURE_STATUS_NONE;
}

Result<DEvent> CudaDriver::EventCreate(unsigned flags) {
  CUevent e = nullptr;
  RETURN_IF_ERROR(Check(api_.cuEventCreate(&e, flags), "cuEventCreate"));
  return static_cast<DEvent>(e);
}

Result<IpcShare> CudaDriver::IpcExportMemory(DevPtr base, uint64_t) {
  CUipcMemHandle h;
  RETURN_IF_ERROR(Check(api_.cuIpcGetMemHandle(&h, base), "cuIpcGetMemHandle"));
  IpcShare s;
  s.handle.assign(reinterpret_cast<const uint8_t*>(&h), reinterpret_cast<const uint8_t*>(&h) + sizeof(h));
  return s;
}

Result<DevPtr> CudaDriver::IpcOpenMemory(const IpcShare& share, uint64_t) {
  CUipcMemHandle h;
  if (share.handle.size() != sizeof(h)) return Error(Err::kInvalidResourceHandle, "no driver IPC handle to open");
  std::memcpy(&h, share.handle.data(), sizeof(h));
  CUdeviceptr p = 0;
  RETURN_IF_ERROR(Check(api_.cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), "cuIpcOpenMemHandle"));
  return static_cast<DevPtr>(p);
}

Result<IpcShare> CudaDriver::IpcExportEvent(DEvent e) {
  CUipcEventHandle h;
  RETURN_IF_ERROR(Check(api_.cuIpcGetEventHandle(&h, static_cast<CUevent>(e)), "cuIpcGetEventHandle"));
  IpcShare s;
  s.handle.assign(reinterpret_cast<const uint8_t*>(&h), reinterpret_cast<const uint8_t*>(&h) + sizeof(h));
  return s;
}

Result<DEvent> CudaDriver::IpcOpenEvent(const IpcShare& share) {
  CUipcEventHandle h;
  if (share.handle.size() != sizeof(h)) return Error(Err::kInvalidResourceHandle, "no driver IPC handle to open");
  std::memcpy(&h, share.handle.data(), sizeof(h));
  CUevent e = nullptr;
  RETURN_IF_ERROR(Check(api_.cuIpcOpenEventHandle(&e, h), "cuIpcOpenEventHandle"));
  return static_cast<DEvent>(e);
}

Result<IpcShare> CudaDriver::MemPoolExport(DPool pool) {
  int fd = -1;
  RETURN_IF_ERROR(Check(api_.cuMemPoolExportToShareableHandle(&fd, static_cast<CUmemoryPool>(pool),
                                                              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                        "cuMemPoolExportToShareableHandle"));
  IpcShare s;
  s.fd = Fd(fd);
  return s;
}

Result<DPool> CudaDriver::MemPoolImport(const IpcShare& share) {
  if (!share.fd) return Error(Err::kInvalidResourceHandle, "no pool descriptor to import");
  CUmemoryPool pool = nullptr;
  RETURN_IF_ERROR(Check(api_.cuMemPoolImportFromShareableHandle(
                            &pool, reinterpret_cast<void*>(static_cast<intptr_t>(share.fd.get())),
                            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                        "cuMemPoolImportFromShareableHandle"));
  return static_cast<DPool>(pool);
}

Result<IpcShare> CudaDriver::MemPoolExportPointer(DevPtr p, uint64_t) {
  CUmemPoolPtrExportData data;
  RETURN_IF_ERROR(Check(api_.cuMemPoolExportPointer(&data, p), "cuMemPoolExportPointer"));
  IpcShare s;
  s.handle.assign(reinterpret_cast<const uint8_t*>(&data), reinterpret_cast<const uint8_t*>(&data) + sizeof(data));
  return s;
}

Result<DevPtr> CudaDriver::MemPoolImportPointer(DPool pool, const IpcShare& share, uint64_t) {
  CUmemPoolPtrExportData data;
  if (share.handle.size() != sizeof(data)) return Error(Err::kInvalidResourceHandle, "no pool pointer export data");
  std::memcpy(&data, share.handle.data(), sizeof(data));
  CUdeviceptr p = 0;
  RETURN_IF_ERROR(Check(api_.cuMemPoolImportPointer(&p, static_cast<CUmemoryPool>(pool), &data), "cuMemPoolImportPointer"));
  return static_cast<DevPtr>(p);
}

Status CudaDriver::EventRecord(DEvent e, DStream s) {
  return Check(api_.cuEventRecord(static_cast<CUevent>(e), static_cast<CUstream>(s)), "cuEventRecord");
}

Status CudaDriver::EventSynchronize(DEvent e) {
  return Check(api_.cuEventSynchronize(static_cast<CUevent>(e)), "cuEventSynchronize");
}

Result<float> CudaDriver::EventElapsedMs(DEvent a, DEvent b) {
  float ms = 0;
  RETURN_IF_ERROR(Check(api_.cuEventElapsedTime(&ms, static_cast<CUevent>(a), static_cast<CUevent>(b)), "cuEventElapsedTime"));
  return ms;
}

Result<Activity*> CudaDriver::activity() {
  if (!activity_) {
    ASSIGN_OR_RETURN(std::unique_ptr<Activity> a, MakeCuptiActivity());
    activity_ = std::move(a);
  }
  return activity_.get();
}

Status CudaDriver::LaunchHostFunc(DStream s, void (*fn)(void*), void* arg) {
  return Check(api_.cuLaunchHostFunc(static_cast<CUstream>(s), fn, arg), "cuLaunchHostFunc");
}

}  // namespace remora::worker::cuda_backend

namespace remora::worker {

using cuda_backend::Api;
using cuda_backend::CudaDriver;
using cuda_backend::GetProcAddressFn;

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
