// remora_core_device_*: the session's devices for the NVML facade (core_devices.h).
#include "core_devices.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>

#include "driver/driver.h"
#include "runtime.h"

using namespace remora;
using namespace remora::shim;

#define REMORA_CORE extern "C" __attribute__((visibility("default")))

REMORA_CORE int remora_core_device_count(int* count) {
  if (count == nullptr) return cudaErrorInvalidValue;
  auto devs = Runtime::Get().Devices();
  if (!devs.ok()) return static_cast<int>(devs.status().raw());
  *count = static_cast<int>((*devs)->size());
  return 0;
}

REMORA_CORE int remora_core_device_get(int index, remora_core_device* out) {
  if (out == nullptr) return cudaErrorInvalidValue;
  auto d = Runtime::Get().Device(index);
  if (!d.ok()) return static_cast<int>(d.status().raw());
  std::memset(out, 0, sizeof(*out));
  std::strncpy(out->name, (*d)->name.c_str(), sizeof(out->name) - 1);
  std::memcpy(out->uuid, (*d)->uuid, sizeof(out->uuid));
  std::strncpy(out->pci_bus_id, (*d)->pci_bus_id.c_str(), sizeof(out->pci_bus_id) - 1);
  out->total_memory = (*d)->total_memory;
  out->emulated = (*d)->emulated ? 1 : 0;
  return 0;
}

REMORA_CORE int remora_core_device_memory(int index, uint64_t* free_bytes, uint64_t* total_bytes) {
  if (free_bytes == nullptr || total_bytes == nullptr) return cudaErrorInvalidValue;
  auto d = Runtime::Get().Device(index);
  if (!d.ok()) return static_cast<int>(d.status().raw());
  size_t f = 0, t = 0;
  CUresult r = driver::OnDevice(index, [&] { return cudaMemGetInfo(&f, &t); });
  if (r != CUDA_SUCCESS) return static_cast<int>(r);
  *free_bytes = f;
  *total_bytes = t;
  return 0;
}

REMORA_CORE int remora_core_driver_version(int* version) {
  return static_cast<int>(cuDriverGetVersion(version));
}
