// Initialisation, versions, error strings and devices of the driver API, answered in the
// client from the session's device list (the tenant's view: memory is the tenant's limit).
#include <cstring>
#include <strings.h>

#include "driver/driver.h"
#include "driver/objects.h"
#include "export.h"
#include "multi_server.h"
#include "remote_call.h"
#include "process.h"
#include "runtime.h"

using namespace remora;
using namespace remora::shim;
using namespace remora::shim::driver;

namespace {

struct StatusName {
  int code;
  const char* name;
};
constexpr StatusName kNames[] = {
#include "cuda_status_names.inc"
};
struct ErrorText {
  int code;
  const char* name;
  const char* text;
};
constexpr ErrorText kTexts[] = {
#include "error_table.inc"
};

Result<std::shared_ptr<const DeviceEntry>> DeviceOf(CUdevice dev) {
  auto d = Runtime::Get().Device(dev);
  if (!d.ok()) return Status(Domain::kCuda, CUDA_ERROR_INVALID_DEVICE, d.status().message());
  return d;
}

}  // namespace

REMORA_API CUresult cuInit(unsigned int flags) {
  if (flags != 0) return Invalid("cuInit", "flags must be 0");
  auto c = Runtime::Get().Session();
  if (!c.ok()) return FromStatus(c.status(), "cuInit");
  // As the driver: no device left visible by CUDA_VISIBLE_DEVICES is no device.
  auto devs = Runtime::Get().Devices();
  if (devs.ok() && (*devs)->empty() && Runtime::Get().VisibleDevicesVariable()) {
    if (Runtime::Get().VisibleDevicesNamedTwice())
      return FromStatus(Status(Domain::kCuda, CUDA_ERROR_INVALID_DEVICE, "CUDA_VISIBLE_DEVICES names a device twice"), "cuInit");
    return FromStatus(Status(Domain::kCuda, CUDA_ERROR_NO_DEVICE, "CUDA_VISIBLE_DEVICES makes no device visible"), "cuInit");
  }
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuDriverGetVersion(int* version) {
  if (version == nullptr) return Invalid("cuDriverGetVersion", "driverVersion is NULL");
  // The server's driver; without a session yet, the version Remora is built for.
  auto c = Runtime::Get().Session();
  *version = c.ok() && (*c)->session().driver_version > 0 ? (*c)->session().driver_version : CUDA_VERSION;
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuGetErrorName(CUresult error, const char** str) {
  if (str == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (const auto& n : kNames) {
    if (n.code == static_cast<int>(error)) {
      *str = n.name;
      return CUDA_SUCCESS;
    }
  }
  *str = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}

REMORA_API CUresult cuGetErrorString(CUresult error, const char** str) {
  if (str == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const char* name = nullptr;
  if (cuGetErrorName(error, &name) != CUDA_SUCCESS) {
    *str = nullptr;
    return CUDA_ERROR_INVALID_VALUE;
  }
  // The runtime's description of the same number where the two APIs share it.
  for (const auto& t : kTexts) {
    if (t.code == static_cast<int>(error)) {
      *str = t.text;
      return CUDA_SUCCESS;
    }
  }
  *str = name;
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuDeviceGetCount(int* count) {
  if (count == nullptr) return Invalid("cuDeviceGetCount", "count is NULL");
  auto devs = Runtime::Get().Devices();
  if (!devs.ok()) return FromStatus(devs.status(), "cuDeviceGetCount");
  *count = static_cast<int>((*devs)->size());
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (device == nullptr) return Invalid("cuDeviceGet", "device is NULL");
  auto d = DeviceOf(ordinal);
  if (!d.ok()) return FromStatus(d.status(), "cuDeviceGet");
  *device = ordinal;
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  if (name == nullptr || len <= 0) return Invalid("cuDeviceGetName", "bad buffer");
  auto d = DeviceOf(dev);
  if (!d.ok()) return FromStatus(d.status(), "cuDeviceGetName");
  std::strncpy(name, (*d)->name.c_str(), static_cast<size_t>(len) - 1);
  name[len - 1] = '\0';
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) {
  if (uuid == nullptr) return Invalid("cuDeviceGetUuid", "uuid is NULL");
  auto d = DeviceOf(dev);
  if (!d.ok()) return FromStatus(d.status(), "cuDeviceGetUuid");
  std::memcpy(uuid->bytes, (*d)->uuid, sizeof(uuid->bytes));
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) { return cuDeviceGetUuid_v2(uuid, dev); }

REMORA_API CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  if (bytes == nullptr) return Invalid("cuDeviceTotalMem", "bytes is NULL");
  auto d = DeviceOf(dev);
  if (!d.ok()) return FromStatus(d.status(), "cuDeviceTotalMem");
  *bytes = (*d)->total_memory;  // the tenant's view
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute attrib, CUdevice dev) {
  if (value == nullptr) return Invalid("cuDeviceGetAttribute", "pi is NULL");
  auto d = DeviceOf(dev);
  if (!d.ok()) return FromStatus(d.status(), "cuDeviceGetAttribute");
  auto a = static_cast<size_t>(attrib);
  if (attrib <= 0 || a >= (*d)->attributes.size()) return Invalid("cuDeviceGetAttribute", "unknown attribute");
  *value = (*d)->attributes[a];
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuDeviceGetPCIBusId(char* bus, int len, CUdevice dev) {
  if (bus == nullptr || len <= 0) return Invalid("cuDeviceGetPCIBusId", "bad buffer");
  auto d = DeviceOf(dev);
  if (!d.ok()) return FromStatus(d.status(), "cuDeviceGetPCIBusId");
  std::strncpy(bus, (*d)->pci_bus_id.c_str(), static_cast<size_t>(len) - 1);
  bus[len - 1] = '\0';
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuDeviceGetByPCIBusId(CUdevice* dev, const char* bus) {
  if (dev == nullptr || bus == nullptr) return Invalid("cuDeviceGetByPCIBusId", "NULL argument");
  auto devs = Runtime::Get().Devices();
  if (!devs.ok()) return FromStatus(devs.status(), "cuDeviceGetByPCIBusId");
  for (const DeviceEntry& d : **devs) {
    if (strcasecmp(d.pci_bus_id.c_str(), bus) == 0) {
      *dev = d.ordinal;
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_DEVICE;
}

REMORA_API CUresult cuDeviceComputeCapability(int* major, int* minor, CUdevice dev) {
  if (major == nullptr || minor == nullptr) return Invalid("cuDeviceComputeCapability", "NULL argument");
  if (CUresult r = cuDeviceGetAttribute(major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev); r != CUDA_SUCCESS) return r;
  return cuDeviceGetAttribute(minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
}

REMORA_API CUresult cuDeviceGetProperties(CUdevprop* prop, CUdevice dev) {
  if (prop == nullptr) return Invalid("cuDeviceGetProperties", "prop is NULL");
  auto d = DeviceOf(dev);
  if (!d.ok()) return FromStatus(d.status(), "cuDeviceGetProperties");
  auto a = [&](CUdevice_attribute k) { return static_cast<size_t>(k) < (*d)->attributes.size() ? (*d)->attributes[k] : 0; };
  prop->maxThreadsPerBlock = a(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  prop->maxThreadsDim[0] = a(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X);
  prop->maxThreadsDim[1] = a(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y);
  prop->maxThreadsDim[2] = a(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z);
  prop->maxGridSize[0] = a(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X);
  prop->maxGridSize[1] = a(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y);
  prop->maxGridSize[2] = a(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z);
  prop->sharedMemPerBlock = a(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
  prop->totalConstantMemory = a(CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY);
  prop->SIMDWidth = a(CU_DEVICE_ATTRIBUTE_WARP_SIZE);
  prop->memPitch = a(CU_DEVICE_ATTRIBUTE_MAX_PITCH);
  prop->regsPerBlock = a(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK);
  prop->clockRate = a(CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
  prop->textureAlign = a(CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT);
  return CUDA_SUCCESS;
}

// Devices of two servers are never peers (multi_server.h).
REMORA_API CUresult cuDeviceCanAccessPeer(int* canAccessPeer, CUdevice dev, CUdevice peerDev) {
  return static_cast<CUresult>(
      FinishApi(Domain::kCuda, CanAccessPeer(canAccessPeer, dev, peerDev, "cuDeviceCanAccessPeer"), "cuDeviceCanAccessPeer"));
}

// A wait for another server's event blocks here (multi_server.h).
static CUresult WaitEvent(CUstream stream, CUevent event, unsigned flags, bool per_thread) {
  Status st = StreamWaitEvent(reinterpret_cast<cudaStream_t>(stream), reinterpret_cast<cudaEvent_t>(event), flags,
                              per_thread, "cuStreamWaitEvent");
  return static_cast<CUresult>(FinishApi(Domain::kCuda, st, "cuStreamWaitEvent"));
}
REMORA_API CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags) {
  return WaitEvent(hStream, hEvent, Flags, false);
}
REMORA_API CUresult cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags) {
  return WaitEvent(hStream, hEvent, Flags, true);
}

REMORA_API CUresult cuDeviceGetExecAffinitySupport(int* pi, CUexecAffinityType type, CUdevice dev) {
  if (pi == nullptr) return Invalid("cuDeviceGetExecAffinitySupport", "pi is NULL");
  auto d = DeviceOf(dev);
  if (!d.ok()) return FromStatus(d.status(), "cuDeviceGetExecAffinitySupport");
  if (type != CU_EXEC_AFFINITY_TYPE_SM_COUNT) return Invalid("cuDeviceGetExecAffinitySupport", "unknown type");
  *pi = 0;  // contexts with an SM-count affinity are not supported by Remora
  return CUDA_SUCCESS;
}

// Registrations are kept and checked; Remora never sends the one notification CUDA defines
// (CU_ASYNC_NOTIFICATION_TYPE_OVER_BUDGET): a tenant's budget is its quota, and going over it
// fails the allocation with CUDA_ERROR_OUT_OF_MEMORY instead.
REMORA_API CUresult cuDeviceRegisterAsyncNotification(CUdevice device, CUasyncCallback callbackFunc, void* userData,
                                                      CUasyncCallbackHandle* callback) {
  if (callbackFunc == nullptr || callback == nullptr) return Invalid("cuDeviceRegisterAsyncNotification", "NULL argument");
  auto d = DeviceOf(device);
  if (!d.ok()) return FromStatus(d.status(), "cuDeviceRegisterAsyncNotification");
  *callback = Process::Get().driver_objects().AddAsyncCallback(device, callbackFunc, userData);
  return CUDA_SUCCESS;
}

REMORA_API CUresult cuDeviceUnregisterAsyncNotification(CUdevice device, CUasyncCallbackHandle callback) {
  auto d = DeviceOf(device);
  if (!d.ok()) return FromStatus(d.status(), "cuDeviceUnregisterAsyncNotification");
  if (!Process::Get().driver_objects().RemoveAsyncCallback(device, callback))
    return Invalid("cuDeviceUnregisterAsyncNotification", "not a registration of this device");
  return CUDA_SUCCESS;
}
