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

// NVML's devices are all of the session's, in their enumeration order: CUDA_VISIBLE_DEVICES
// does not change them (it does not change NVML's), PyTorch applies it to them itself.
namespace {
Result<std::shared_ptr<const DeviceEntry>> SessionDevice(int index) {
  ASSIGN_OR_RETURN(Runtime::DeviceList devs, Runtime::Get().SessionDevices());
  if (index < 0 || static_cast<size_t>(index) >= devs->size())
    return Error(Err::kInvalidDevice, "device {} does not exist ({} device(s))", index, devs->size());
  return std::shared_ptr<const DeviceEntry>(devs, &(*devs)[static_cast<size_t>(index)]);
}
}  // namespace

REMORA_CORE int remora_core_device_count(int* count) {
  if (count == nullptr) return cudaErrorInvalidValue;
  auto devs = Runtime::Get().SessionDevices();
  if (!devs.ok()) return static_cast<int>(devs.status().raw());
  *count = static_cast<int>((*devs)->size());
  return 0;
}

REMORA_CORE int remora_core_device_get(int index, remora_core_device* out) {
  if (out == nullptr) return cudaErrorInvalidValue;
  auto d = SessionDevice(index);
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
  auto d = SessionDevice(index);
  if (!d.ok()) return static_cast<int>(d.status().raw());
  if ((*d)->ordinal >= 0) {
    size_t f = 0, t = 0;
    CUresult r = driver::OnDevice((*d)->ordinal, [&] { return cudaMemGetInfo(&f, &t); });
    if (r != CUDA_SUCCESS) return static_cast<int>(r);
    *free_bytes = f;
    *total_bytes = t;
    return 0;
  }
  // Hidden from the application by CUDA_VISIBLE_DEVICES: asked of its server directly.
  const auto& links = Runtime::Get().links();
  if ((*d)->link < 0 || static_cast<size_t>((*d)->link) >= links.size()) return cudaErrorInvalidDevice;
  Status st = links[static_cast<size_t>((*d)->link)]->CallLocal(
      (*d)->local, [](wire::Request::Builder& r) { r.setMemGetInfo(); },
      [&](wire::Reply::Reader& r) -> Status {
        if (!r.isMemInfo()) return Error(Err::kUnknown, "malformed memory info");
        *free_bytes = r.getMemInfo().getFree();
        *total_bytes = r.getMemInfo().getTotal();
        return Status::Ok();
      });
  return st.ok() ? 0 : static_cast<int>(st.raw());
}

REMORA_CORE int remora_core_driver_version(int* version) {
  return static_cast<int>(cuDriverGetVersion(version));
}

REMORA_CORE int remora_core_kernel_driver_version(char* out, unsigned size) {
  if (out == nullptr || size == 0) return cudaErrorInvalidValue;
  auto c = Runtime::Get().Session();
  if (!c.ok()) return static_cast<int>(c.status().raw());
  std::string v = (*c)->session().kernel_driver;
  if (v.size() >= size) return cudaErrorInvalidValue;
  std::memcpy(out, v.c_str(), v.size() + 1);
  return 0;
}
