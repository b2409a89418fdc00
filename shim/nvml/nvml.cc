// libnvidia-ml.so.1: NVML as a Remora client sees it - the session's devices, never this
// machine's GPUs. PyTorch counts devices through NVML before it initialises CUDA (and
// pynvml-based tools ask for names and memory); the real library would report, and touch,
// the local GPU. What is answered: initialisation, the driver versions, the device count,
// handles by index, names, UUIDs, indices and memory (the tenant's quota view). Every other
// NVML function is absent, as in an older NVML; monitoring belongs to the server's /metrics.
#include <cstdio>
#include <cstring>
#include <mutex>

#include "core_devices.h"

namespace {

using nvmlReturn_t = int;
constexpr nvmlReturn_t kSuccess = 0;
constexpr nvmlReturn_t kUninitialized = 1;
constexpr nvmlReturn_t kInvalidArgument = 2;
constexpr nvmlReturn_t kNotSupported = 3;
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

NVML_API nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  int v = 0;
  if (nvmlReturn_t r = nvmlSystemGetCudaDriverVersion(&v); r != kSuccess) return r;
  char s[32];
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
  const uint8_t* u = d.uuid;
  char s[64];
  std::snprintf(s, sizeof(s), "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2],
                u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
  return CopyString(s, uuid, length);
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
