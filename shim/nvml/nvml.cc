// libnvidia-ml.so.1: NVML as a Remora client sees it - the session's devices, never this
// machine's GPUs. PyTorch counts devices through NVML before it initialises CUDA (and
// pynvml-based tools ask for names and memory); the real library would report, and touch,
// the local GPU. What is answered: initialisation, the driver versions, the device count,
// handles by index, PCI bus id and UUID, names, UUIDs, indices and memory (the tenant's quota
// view); what PyTorch's allocator looks up by name (c10/cuda/driver_api) is present too, NVLink
// and fabric queries answering NVML_ERROR_NOT_SUPPORTED and running processes none (a client
// sees no other processes). Every other NVML function is absent, as in an older NVML;
// monitoring belongs to the server's /metrics.
#include <cstdio>
#include <cstring>
#include <string>
#include <mutex>

#include "core_devices.h"

namespace {

using nvmlReturn_t = int;
constexpr nvmlReturn_t kSuccess = 0;
constexpr nvmlReturn_t kUninitialized = 1;
constexpr nvmlReturn_t kInvalidArgument = 2;
constexpr nvmlReturn_t kNotSupported = 3;
constexpr nvmlReturn_t kNotFound = 6;
constexpr nvmlReturn_t kInsufficientSize = 7;
constexpr nvmlReturn_t kDriverNotLoaded = 9;
constexpr nvmlReturn_t kUnknown = 999;
constexpr int kMaxDevices = 64;

struct Device {
  int index;
};
Device g_devices[kMaxDevices] = {};  // the handles: constant addresses, one per index
std::mutex g_mu;
int g_inits = 0;  // nvmlInit minus nvmlShutdown

bool Initialised() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_inits > 0;
}

nvmlReturn_t IndexOf(void* handle, int* index) {
  if (!Initialised()) return kUninitialized;
  auto* d = static_cast<Device*>(handle);
  if (d < g_devices || d >= g_devices + kMaxDevices) return kInvalidArgument;
  *index = d->index;
  return kSuccess;
}

nvmlReturn_t CopyString(const char* s, char* out, unsigned length) {
  if (out == nullptr) return kInvalidArgument;
  if (std::strlen(s) + 1 > length) return kInsufficientSize;
  std::strcpy(out, s);
  return kSuccess;
}

std::string UuidText(const uint8_t* u) {
  char s[64];
  std::snprintf(s, sizeof(s), "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2],
                u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
  return s;
}

// "domain:bus:device.function" in hex, NVML's 8-digit domain or CUDA's 4-digit one alike.
bool ParseBusId(const char* text, unsigned v[4]) {
  char tail = 0;
  return text != nullptr && std::sscanf(text, "%x:%x:%x.%x%c", &v[0], &v[1], &v[2], &v[3], &tail) == 4;
}

// The handle of the device `match` accepts, or kNotFound.
template <typename Match>
nvmlReturn_t FindDevice(Match match, void** device) {
  if (device == nullptr) return kInvalidArgument;
  if (!Initialised()) return kUninitialized;
  int n = 0;
  if (remora_core_device_count(&n) != 0) return kUnknown;
  for (int i = 0; i < n && i < kMaxDevices; ++i) {
    remora_core_device d;
    if (remora_core_device_get(i, &d) != 0) return kUnknown;
    if (match(d)) {
      *device = &g_devices[i];
      return kSuccess;
    }
  }
  return kNotFound;
}

}  // namespace

#define NVML_API extern "C" __attribute__((visibility("default")))

NVML_API nvmlReturn_t nvmlInitWithFlags(unsigned int) {
  int n = 0;
  // Connecting is what makes the devices known; a client that cannot reach its server sees
  // no driver, as NVML does on a machine without one.
  if (remora_core_device_count(&n) != 0) return kDriverNotLoaded;
  std::lock_guard<std::mutex> lock(g_mu);
  for (int i = 0; i < kMaxDevices; i++) g_devices[i].index = i;
  g_inits++;
  return kSuccess;
}
NVML_API nvmlReturn_t nvmlInit_v2() { return nvmlInitWithFlags(0); }
NVML_API nvmlReturn_t nvmlInit() { return nvmlInitWithFlags(0); }

NVML_API nvmlReturn_t nvmlShutdown() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_inits == 0) return kUninitialized;
  g_inits--;
  return kSuccess;
}

NVML_API const char* nvmlErrorString(nvmlReturn_t r) {
  switch (r) {
    case kSuccess: return "Success";
    case kUninitialized: return "Uninitialized";
    case kInvalidArgument: return "Invalid Argument";
    case kNotSupported: return "Not Supported";
    case kInsufficientSize: return "Insufficient Size";
    case kDriverNotLoaded: return "Driver Not Loaded (the Remora server cannot be reached)";
    default: return "Unknown Error";
  }
}

NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int* version) {
  if (version == nullptr) return kInvalidArgument;
  if (!Initialised()) return kUninitialized;
  return remora_core_driver_version(version) == 0 ? kSuccess : kUnknown;
}
NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* version) { return nvmlSystemGetCudaDriverVersion(version); }

// The server's kernel-mode driver version, as NVIDIA's NVML gives it on the GPU's host
// (XLA parses it as a version); the host-emulated backend has none and says what it is.
NVML_API nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  int v = 0;
  if (nvmlReturn_t r = nvmlSystemGetCudaDriverVersion(&v); r != kSuccess) return r;
  char s[40] = {};
  if (remora_core_kernel_driver_version(s, sizeof s) != 0 || s[0] == '\0')
    std::snprintf(s, sizeof(s), "remora-cuda-%d.%d", v / 1000, (v % 1000) / 10);
  return CopyString(s, version, length);
}

NVML_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  if (count == nullptr) return kInvalidArgument;
  if (!Initialised()) return kUninitialized;
  int n = 0;
  if (remora_core_device_count(&n) != 0) return kUnknown;
  *count = static_cast<unsigned>(n < kMaxDevices ? n : kMaxDevices);
  return kSuccess;
}
NVML_API nvmlReturn_t nvmlDeviceGetCount(unsigned int* count) { return nvmlDeviceGetCount_v2(count); }

NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, void** device) {
  if (device == nullptr) return kInvalidArgument;
  unsigned n = 0;
  if (nvmlReturn_t r = nvmlDeviceGetCount_v2(&n); r != kSuccess) return r;
  if (index >= n) return kInvalidArgument;
  *device = &g_devices[index];
  return kSuccess;
}
NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, void** device) {
  return nvmlDeviceGetHandleByIndex_v2(index, device);
}

NVML_API nvmlReturn_t nvmlDeviceGetIndex(void* device, unsigned int* index) {
  if (index == nullptr) return kInvalidArgument;
  int i = 0;
  if (nvmlReturn_t r = IndexOf(device, &i); r != kSuccess) return r;
  *index = static_cast<unsigned>(i);
  return kSuccess;
}

NVML_API nvmlReturn_t nvmlDeviceGetName(void* device, char* name, unsigned int length) {
  int i = 0;
  if (nvmlReturn_t r = IndexOf(device, &i); r != kSuccess) return r;
  remora_core_device d;
  if (remora_core_device_get(i, &d) != 0) return kInvalidArgument;
  return CopyString(d.name, name, length);
}

NVML_API nvmlReturn_t nvmlDeviceGetUUID(void* device, char* uuid, unsigned int length) {
  int i = 0;
  if (nvmlReturn_t r = IndexOf(device, &i); r != kSuccess) return r;
  remora_core_device d;
  if (remora_core_device_get(i, &d) != 0) return kInvalidArgument;
  return CopyString(UuidText(d.uuid).c_str(), uuid, length);
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, void** device) {
  if (uuid == nullptr) return kInvalidArgument;
  return FindDevice([&](const remora_core_device& d) { return UuidText(d.uuid) == uuid; }, device);
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* bus_id, void** device) {
  unsigned want[4];
  if (!ParseBusId(bus_id, want)) return kInvalidArgument;
  return FindDevice(
      [&](const remora_core_device& d) {
        unsigned have[4];
        return ParseBusId(d.pci_bus_id, have) && std::memcmp(have, want, sizeof(want)) == 0;
      },
      device);
}
NVML_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char* bus_id, void** device) {
  return nvmlDeviceGetHandleByPciBusId_v2(bus_id, device);
}

// NVLink and fabric topology belong to the server's GPUs; a client is not told about them.
NVML_API nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(void* device, unsigned int, int* type) {
  int i = 0;
  if (nvmlReturn_t r = IndexOf(device, &i); r != kSuccess) return r;
  return type == nullptr ? kInvalidArgument : kNotSupported;
}
NVML_API nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(void* device, unsigned int, void* pci) {
  int i = 0;
  if (nvmlReturn_t r = IndexOf(device, &i); r != kSuccess) return r;
  return pci == nullptr ? kInvalidArgument : kNotSupported;
}
NVML_API nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(void* device, void* info) {
  int i = 0;
  if (nvmlReturn_t r = IndexOf(device, &i); r != kSuccess) return r;
  return info == nullptr ? kInvalidArgument : kNotSupported;
}
NVML_API nvmlReturn_t nvmlDeviceGetGpuFabricInfo(void* device, void* info) { return nvmlDeviceGetGpuFabricInfoV(device, info); }

// Processes on the server's GPU are other tenants' business: a client sees none.
NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(void* device, unsigned int* count, void*) {
  int i = 0;
  if (nvmlReturn_t r = IndexOf(device, &i); r != kSuccess) return r;
  if (count == nullptr) return kInvalidArgument;
  *count = 0;
  return kSuccess;
}
NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(void* device, unsigned int* count, void* infos) {
  return nvmlDeviceGetComputeRunningProcesses_v3(device, count, infos);
}

struct nvmlMemory_t {
  unsigned long long total, free, used;
};

NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo(void* device, nvmlMemory_t* memory) {
  if (memory == nullptr) return kInvalidArgument;
  int i = 0;
  if (nvmlReturn_t r = IndexOf(device, &i); r != kSuccess) return r;
  uint64_t free_bytes = 0, total = 0;
  if (remora_core_device_memory(i, &free_bytes, &total) != 0) return kUnknown;
  memory->total = total;
  memory->free = free_bytes;
  memory->used = total - free_bytes;
  return kSuccess;
}
