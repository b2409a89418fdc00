// Devices: enumeration and properties (cached; the tenant's view of memory), the calling
// thread's current device, device-wide synchronisation, versions.
#include <cuda_runtime_api.h>

#include <cstring>
#include <strings.h>

#include "driver/contexts.h"
#include "export.h"
#include "cuda_client.h"
#include "device_core.h"
#include "memory_core.h"
#include "runtime.h"

namespace remora::shim {
namespace {

int Attr(const DeviceEntry& d, cudaDeviceAttr a) {
  size_t i = static_cast<size_t>(a);
  return i < d.attributes.size() ? d.attributes[i] : 0;
}

void FillProperties(const DeviceEntry& d, cudaDeviceProp* p) {
  std::memset(p, 0, sizeof(*p));
  std::strncpy(p->name, d.name.c_str(), sizeof(p->name) - 1);
  std::memcpy(&p->uuid, d.uuid, sizeof(p->uuid));
  p->totalGlobalMem = d.total_memory;
  p->sharedMemPerBlock = static_cast<size_t>(Attr(d, cudaDevAttrMaxSharedMemoryPerBlock));
  p->regsPerBlock = Attr(d, cudaDevAttrMaxRegistersPerBlock);
  p->warpSize = Attr(d, cudaDevAttrWarpSize);
  p->memPitch = static_cast<size_t>(Attr(d, cudaDevAttrMaxPitch));
  p->maxThreadsPerBlock = Attr(d, cudaDevAttrMaxThreadsPerBlock);
  p->maxThreadsDim[0] = Attr(d, cudaDevAttrMaxBlockDimX);
  p->maxThreadsDim[1] = Attr(d, cudaDevAttrMaxBlockDimY);
  p->maxThreadsDim[2] = Attr(d, cudaDevAttrMaxBlockDimZ);
  p->maxGridSize[0] = Attr(d, cudaDevAttrMaxGridDimX);
  p->maxGridSize[1] = Attr(d, cudaDevAttrMaxGridDimY);
  p->maxGridSize[2] = Attr(d, cudaDevAttrMaxGridDimZ);
  p->totalConstMem = static_cast<size_t>(Attr(d, cudaDevAttrTotalConstantMemory));
  p->major = Attr(d, cudaDevAttrComputeCapabilityMajor);
  p->minor = Attr(d, cudaDevAttrComputeCapabilityMinor);
  p->textureAlignment = static_cast<size_t>(Attr(d, cudaDevAttrTextureAlignment));
  p->texturePitchAlignment = static_cast<size_t>(Attr(d, cudaDevAttrTexturePitchAlignment));
  p->multiProcessorCount = Attr(d, cudaDevAttrMultiProcessorCount);
  p->integrated = Attr(d, cudaDevAttrIntegrated);
  p->canMapHostMemory = Attr(d, cudaDevAttrCanMapHostMemory);
  p->maxTexture1D = Attr(d, cudaDevAttrMaxTexture1DWidth);
  p->maxTexture2D[0] = Attr(d, cudaDevAttrMaxTexture2DWidth);
  p->maxTexture2D[1] = Attr(d, cudaDevAttrMaxTexture2DHeight);
  p->maxTexture3D[0] = Attr(d, cudaDevAttrMaxTexture3DWidth);
  p->maxTexture3D[1] = Attr(d, cudaDevAttrMaxTexture3DHeight);
  p->maxTexture3D[2] = Attr(d, cudaDevAttrMaxTexture3DDepth);
  p->surfaceAlignment = static_cast<size_t>(Attr(d, cudaDevAttrSurfaceAlignment));
  p->concurrentKernels = Attr(d, cudaDevAttrConcurrentKernels);
  p->ECCEnabled = Attr(d, cudaDevAttrEccEnabled);
  p->pciBusID = Attr(d, cudaDevAttrPciBusId);
  p->pciDeviceID = Attr(d, cudaDevAttrPciDeviceId);
  p->pciDomainID = Attr(d, cudaDevAttrPciDomainId);
  p->tccDriver = Attr(d, cudaDevAttrTccDriver);
  p->asyncEngineCount = Attr(d, cudaDevAttrAsyncEngineCount);
  p->unifiedAddressing = Attr(d, cudaDevAttrUnifiedAddressing);
  p->memoryBusWidth = Attr(d, cudaDevAttrGlobalMemoryBusWidth);
  p->l2CacheSize = Attr(d, cudaDevAttrL2CacheSize);
  p->persistingL2CacheMaxSize = Attr(d, cudaDevAttrMaxPersistingL2CacheSize);
  p->maxThreadsPerMultiProcessor = Attr(d, cudaDevAttrMaxThreadsPerMultiProcessor);
  p->streamPrioritiesSupported = Attr(d, cudaDevAttrStreamPrioritiesSupported);
  p->globalL1CacheSupported = Attr(d, cudaDevAttrGlobalL1CacheSupported);
  p->localL1CacheSupported = Attr(d, cudaDevAttrLocalL1CacheSupported);
  p->sharedMemPerMultiprocessor = static_cast<size_t>(Attr(d, cudaDevAttrMaxSharedMemoryPerMultiprocessor));
  p->regsPerMultiprocessor = Attr(d, cudaDevAttrMaxRegistersPerMultiprocessor);
  p->managedMemory = Attr(d, cudaDevAttrManagedMemory);
  p->isMultiGpuBoard = Attr(d, cudaDevAttrIsMultiGpuBoard);
  p->multiGpuBoardGroupID = Attr(d, cudaDevAttrMultiGpuBoardGroupID);
  p->hostNativeAtomicSupported = Attr(d, cudaDevAttrHostNativeAtomicSupported);
  p->pageableMemoryAccess = Attr(d, cudaDevAttrPageableMemoryAccess);
  p->concurrentManagedAccess = Attr(d, cudaDevAttrConcurrentManagedAccess);
  p->computePreemptionSupported = Attr(d, cudaDevAttrComputePreemptionSupported);
  p->canUseHostPointerForRegisteredMem = Attr(d, cudaDevAttrCanUseHostPointerForRegisteredMem);
  p->cooperativeLaunch = Attr(d, cudaDevAttrCooperativeLaunch);
  p->sharedMemPerBlockOptin = static_cast<size_t>(Attr(d, cudaDevAttrMaxSharedMemoryPerBlockOptin));
  p->pageableMemoryAccessUsesHostPageTables = Attr(d, cudaDevAttrPageableMemoryAccessUsesHostPageTables);
  p->directManagedMemAccessFromHost = Attr(d, cudaDevAttrDirectManagedMemAccessFromHost);
  p->maxBlocksPerMultiProcessor = Attr(d, cudaDevAttrMaxBlocksPerMultiprocessor);
  p->accessPolicyMaxWindowSize = Attr(d, cudaDevAttrMaxAccessPolicyWindowSize);
  p->reservedSharedMemPerBlock = static_cast<size_t>(Attr(d, cudaDevAttrReservedSharedMemoryPerBlock));
  p->hostRegisterSupported = Attr(d, cudaDevAttrHostRegisterSupported);
  p->sparseCudaArraySupported = Attr(d, cudaDevAttrSparseCudaArraySupported);
  p->hostRegisterReadOnlySupported = Attr(d, cudaDevAttrHostRegisterReadOnlySupported);
  p->timelineSemaphoreInteropSupported = Attr(d, cudaDevAttrTimelineSemaphoreInteropSupported);
  p->memoryPoolsSupported = Attr(d, cudaDevAttrMemoryPoolsSupported);
  p->gpuDirectRDMASupported = Attr(d, cudaDevAttrGPUDirectRDMASupported);
  p->gpuDirectRDMAFlushWritesOptions = static_cast<unsigned>(Attr(d, cudaDevAttrGPUDirectRDMAFlushWritesOptions));
  p->gpuDirectRDMAWritesOrdering = Attr(d, cudaDevAttrGPUDirectRDMAWritesOrdering);
  p->memoryPoolSupportedHandleTypes = static_cast<unsigned>(Attr(d, cudaDevAttrMemoryPoolSupportedHandleTypes));
  p->deferredMappingCudaArraySupported = Attr(d, cudaDevAttrDeferredMappingCudaArraySupported);
  p->ipcEventSupported = Attr(d, cudaDevAttrIpcEventSupport);
  p->clusterLaunch = Attr(d, cudaDevAttrClusterLaunch);
  p->unifiedFunctionPointers = Attr(d, static_cast<cudaDeviceAttr>(129));  // CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS
  p->deviceNumaConfig = Attr(d, cudaDevAttrNumaConfig);
  p->deviceNumaId = Attr(d, cudaDevAttrNumaId);
  p->mpsEnabled = Attr(d, cudaDevAttrMpsEnabled);
  p->hostNumaId = Attr(d, cudaDevAttrHostNumaId);
  p->gpuPciDeviceID = static_cast<unsigned>(Attr(d, cudaDevAttrGpuPciDeviceId));
  p->gpuPciSubsystemID = static_cast<unsigned>(Attr(d, cudaDevAttrGpuPciSubsystemId));
}

}  // namespace
}  // namespace remora::shim

using namespace remora;
using namespace remora::shim;

REMORA_API cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return Finish(Error(Err::kInvalidValue, "count is NULL"), "cudaGetDeviceCount");
  *count = 0;
  auto c = Runtime::Get().Session();
  if (!c.ok()) return Finish(c.status(), "cudaGetDeviceCount");
  // One round trip to learn whether the device list changed (hot attach/detach).
  Status st = (*c)->Call(0, [](wire::Request::Builder& r) { r.setPing(); }, [](wire::Reply::Reader&) { return Status::Ok(); });
  if (!st.ok()) return Finish(st, "cudaGetDeviceCount");
  auto devs = Runtime::Get().Devices();
  if (!devs.ok()) return Finish(devs.status(), "cudaGetDeviceCount");
  *count = static_cast<int>((*devs)->size());
  if (*count == 0) {
    if (auto v = Runtime::Get().VisibleDevicesVariable())
      return Finish(Error(Runtime::Get().VisibleDevicesNamedTwice() ? Err::kInvalidDevice : Err::kNoDevice,
                          "CUDA_VISIBLE_DEVICES=\"{}\" makes none of the session's devices visible{}", *v,
                          Runtime::Get().VisibleDevicesNamedTwice() ? " (it names a device twice)" : ""),
                    "cudaGetDeviceCount");
    return Finish(Error(Err::kNoDevice, "no GPU is attached to this tenant"), "cudaGetDeviceCount");
  }
  return cudaSuccess;
}

REMORA_API cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return Finish(Error(Err::kInvalidValue, "device is NULL"), "cudaGetDevice");
  auto c = Runtime::Get().Session();
  if (!c.ok()) return Finish(c.status(), "cudaGetDevice");
  *device = Thread().device;
  return cudaSuccess;
}

REMORA_API cudaError_t cudaSetDevice(int device) {
  auto d = Runtime::Get().Device(device);
  if (!d.ok()) return Finish(d.status(), "cudaSetDevice");
  if ((*d)->detached) return Finish(Error(Err::kDevicesUnavailable, "device {} was detached", device), "cudaSetDevice");
  ThreadState& t = Thread();
  t.device = device;
  t.device_set = true;
  // As in CUDA: the device's primary context becomes the thread's current context.
  t.runtime_used = true;
  driver::Contexts& ctxs = Process::Get().contexts();
  ctxs.MarkRuntimeActive(device);
  if (!t.ctx_stack.empty()) t.ctx_stack.back() = ctxs.Primary(device);
  return cudaSuccess;
}

REMORA_API cudaError_t cudaInitDevice(int device, unsigned int, unsigned int) {
  auto d = Runtime::Get().Device(device);
  if (!d.ok()) return Finish(d.status(), "cudaInitDevice");
  return cudaSuccess;
}

REMORA_API cudaError_t cudaSetDeviceFlags(unsigned int flags) {
  Process::Get().device_flags().store(flags);
  return cudaSuccess;
}

REMORA_API cudaError_t cudaGetDeviceFlags(unsigned int* flags) {
  if (flags == nullptr) return Finish(Error(Err::kInvalidValue, "flags is NULL"), "cudaGetDeviceFlags");
  *flags = Process::Get().device_flags().load() | cudaDeviceMapHost;
  return cudaSuccess;
}

REMORA_API cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (prop == nullptr) return Finish(Error(Err::kInvalidValue, "prop is NULL"), "cudaGetDeviceProperties");
  auto d = Runtime::Get().Device(device);
  if (!d.ok()) return Finish(d.status(), "cudaGetDeviceProperties");
  FillProperties(**d, prop);
  return cudaSuccess;
}

REMORA_API cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (value == nullptr) return Finish(Error(Err::kInvalidValue, "value is NULL"), "cudaDeviceGetAttribute");
  auto d = Runtime::Get().Device(device);
  if (!d.ok()) return Finish(d.status(), "cudaDeviceGetAttribute");
  int a = static_cast<int>(attr);
  if (a <= 0 || a >= static_cast<int>((*d)->attributes.size()))
    return Finish(Error(Err::kInvalidValue, "unknown device attribute {}", a), "cudaDeviceGetAttribute");
  *value = (*d)->attributes[static_cast<size_t>(a)];
  return cudaSuccess;
}

REMORA_API cudaError_t cudaDeviceGetPCIBusId(char* pciBusId, int len, int device) {
  if (pciBusId == nullptr || len <= 0) return Finish(Error(Err::kInvalidValue, "bad buffer"), "cudaDeviceGetPCIBusId");
  auto d = Runtime::Get().Device(device);
  if (!d.ok()) return Finish(d.status(), "cudaDeviceGetPCIBusId");
  std::strncpy(pciBusId, (*d)->pci_bus_id.c_str(), static_cast<size_t>(len) - 1);
  pciBusId[len - 1] = '\0';
  return cudaSuccess;
}

REMORA_API cudaError_t cudaDeviceGetByPCIBusId(int* device, const char* pciBusId) {
  if (device == nullptr || pciBusId == nullptr) return Finish(Error(Err::kInvalidValue, "NULL argument"), "cudaDeviceGetByPCIBusId");
  auto devs = Runtime::Get().Devices();
  if (!devs.ok()) return Finish(devs.status(), "cudaDeviceGetByPCIBusId");
  for (const DeviceEntry& d : **devs) {
    if (strcasecmp(d.pci_bus_id.c_str(), pciBusId) == 0) {
      *device = d.ordinal;
      return cudaSuccess;
    }
  }
  return Finish(Error(Err::kInvalidDevice, "no device at PCI bus id {}", pciBusId), "cudaDeviceGetByPCIBusId");
}

REMORA_API cudaError_t cudaChooseDevice(int* device, const cudaDeviceProp* prop) {
  if (device == nullptr || prop == nullptr) return Finish(Error(Err::kInvalidValue, "NULL argument"), "cudaChooseDevice");
  auto devs = Runtime::Get().Devices();
  if (!devs.ok()) return Finish(devs.status(), "cudaChooseDevice");
  // The closest compute capability among attached devices.
  int best = -1, best_score = INT32_MAX;
  for (const DeviceEntry& d : **devs) {
    if (d.detached) continue;
    int cc = Attr(d, cudaDevAttrComputeCapabilityMajor) * 10 + Attr(d, cudaDevAttrComputeCapabilityMinor);
    int score = std::abs(cc - (prop->major * 10 + prop->minor));
    if (score < best_score) {
      best = d.ordinal;
      best_score = score;
    }
  }
  if (best < 0) return Finish(Error(Err::kNoDevice, "no device attached"), "cudaChooseDevice");
  *device = best;
  return cudaSuccess;
}

namespace remora::shim {

Status SynchronizeDevice() {
  ASSIGN_OR_RETURN(int dev, Runtime::Get().CurrentDevice());
  Client* c = *Runtime::Get().SessionFor(dev);  // its server's link (CurrentDevice connected)
  // Nothing was queued anywhere, nor heard from the server, since this device's last
  // synchronisation completed (a synchronous copy, say): nothing to wait for, no round trip.
  uint64_t seq = c->work_sequence();
  if (c->SyncedAt(dev, seq) && c->broken().ok() && c->sticky().ok()) return AfterSync(c, Status::Ok());
  Status st = c->Call(dev, [](wire::Request::Builder& r) { r.setDeviceSynchronize(); },
                      [](wire::Reply::Reader&) { return Status::Ok(); });
  if (st.ok()) c->NoteSynced(dev, seq);
  return AfterSync(c, st);
}

Status ResetDevice() {
  ASSIGN_OR_RETURN(int dev, Runtime::Get().CurrentDevice());
  Client* c = *Runtime::Get().Session();
  RETURN_IF_ERROR(c->Call(dev, [](wire::Request::Builder& r) { r.setDeviceReset(); },
                          [](wire::Reply::Reader&) { return Status::Ok(); }));
  Runtime::Get().ForgetDevice(dev);
  return Status::Ok();
}

}  // namespace remora::shim

REMORA_API cudaError_t cudaDeviceSynchronize() { return Finish(SynchronizeDevice(), "cudaDeviceSynchronize"); }

REMORA_API cudaError_t cudaDeviceReset() { return Finish(ResetDevice(), "cudaDeviceReset"); }

namespace remora::shim {

Status DeviceMemoryInfo(size_t* free, size_t* total) {
  if (free == nullptr || total == nullptr) return Error(Err::kInvalidValue, "NULL argument");
  ASSIGN_OR_RETURN(int dev, Runtime::Get().CurrentDevice());
  Client* c = *Runtime::Get().Session();
  return c->Call(dev, [](wire::Request::Builder& r) { r.setMemGetInfo(); },
                 [&](wire::Reply::Reader& r) -> Status {
                   *free = r.getMemInfo().getFree();
                   *total = r.getMemInfo().getTotal();
                   return Status::Ok();
                 });
}

}  // namespace remora::shim

REMORA_API cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  return Finish(DeviceMemoryInfo(free, total), "cudaMemGetInfo");
}

REMORA_API cudaError_t cudaRuntimeGetVersion(int* version) {
  if (version == nullptr) return Finish(Error(Err::kInvalidValue, "version is NULL"), "cudaRuntimeGetVersion");
  *version = CUDART_VERSION;
  return cudaSuccess;
}

REMORA_API cudaError_t cudaDriverGetVersion(int* version) {
  if (version == nullptr) return Finish(Error(Err::kInvalidValue, "version is NULL"), "cudaDriverGetVersion");
  auto c = Runtime::Get().Session();
  // As CUDA does without a driver: 0 and success.
  *version = c.ok() ? (*c)->session().driver_version : 0;
  return cudaSuccess;
}

REMORA_API cudaError_t cudaSetValidDevices(int* device_arr, int len) {
  if (len < 0 || (len > 0 && device_arr == nullptr))
    return Finish(Error(Err::kInvalidValue, "bad device list"), "cudaSetValidDevices");
  auto devs = Runtime::Get().Devices();
  if (!devs.ok()) return Finish(devs.status(), "cudaSetValidDevices");
  std::vector<int> list;
  for (int i = 0; i < len; i++) {
    if (device_arr[i] < 0 || static_cast<size_t>(device_arr[i]) >= (*devs)->size())
      return Finish(Error(Err::kInvalidDevice, "device {} does not exist", device_arr[i]), "cudaSetValidDevices");
    list.push_back(device_arr[i]);
  }
  Runtime::Get().SetValidDevices(std::move(list));
  return cudaSuccess;
}

// The driver takes a format and a channel count where the runtime takes a channel
// descriptor: convert, then ask the device.
REMORA_API cudaError_t cudaDeviceGetTexture1DLinearMaxWidth(size_t* maxWidthInElements, const cudaChannelFormatDesc* fmtDesc,
                                                            int device) {
  constexpr const char* kCall = "cudaDeviceGetTexture1DLinearMaxWidth";
  if (maxWidthInElements == nullptr || fmtDesc == nullptr) return Finish(Error(Err::kInvalidValue, "NULL argument"), kCall);
  int bits[4] = {fmtDesc->x, fmtDesc->y, fmtDesc->z, fmtDesc->w};
  unsigned channels = 0;
  for (int b : bits) {
    if (b == 0) break;
    if (b != fmtDesc->x) return Finish(Error(Err::kInvalidValue, "channels of different widths"), kCall);
    channels++;
  }
  CUarray_format format;
  switch (fmtDesc->f) {
    case cudaChannelFormatKindSigned:
      format = fmtDesc->x == 8 ? CU_AD_FORMAT_SIGNED_INT8 : fmtDesc->x == 16 ? CU_AD_FORMAT_SIGNED_INT16 : CU_AD_FORMAT_SIGNED_INT32;
      break;
    case cudaChannelFormatKindUnsigned:
      format = fmtDesc->x == 8 ? CU_AD_FORMAT_UNSIGNED_INT8 : fmtDesc->x == 16 ? CU_AD_FORMAT_UNSIGNED_INT16 : CU_AD_FORMAT_UNSIGNED_INT32;
      break;
    case cudaChannelFormatKindFloat:
      format = fmtDesc->x == 16 ? CU_AD_FORMAT_HALF : CU_AD_FORMAT_FLOAT;
      break;
    default:
      return Finish(Error(Err::kInvalidValue, "channel format kind {} has no linear texture", static_cast<int>(fmtDesc->f)), kCall);
  }
  bool valid_width = fmtDesc->x == 8 || fmtDesc->x == 16 || fmtDesc->x == 32;
  if (channels == 0 || channels == 3 || !valid_width || (fmtDesc->f == cudaChannelFormatKindFloat && fmtDesc->x == 8))
    return Finish(Error(Err::kInvalidValue, "unsupported channel descriptor"), kCall);
  Status st = gen::cuda::cuDeviceGetTexture1DLinearMaxWidth(CallCtx{false, kCall}, maxWidthInElements, format, channels, device);
  return Finish(st, kCall);
}
