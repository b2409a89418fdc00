// The core's device view for Remora's other facades that are not API tables (the NVML
// facade, shim/nvml/): plain C, exported by libremora-core.so (REMORA_CORE_1). Each call
// connects the session on first use, like any CUDA call. Thread-safe.
#pragma once

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  char name[256];
  uint8_t uuid[16];
  char pci_bus_id[32];
  uint64_t total_memory;  // the tenant's view
  int emulated;           // a host-emulated device (no GPU)
} remora_core_device;

// 0 on success, else the cudaError_t of the failure (no session, a bad index...).
int remora_core_device_count(int* count);
int remora_core_device_get(int index, remora_core_device* out);
// Free and total memory of device `index` as the tenant sees them (its quota).
int remora_core_device_memory(int index, uint64_t* free_bytes, uint64_t* total_bytes);
// The CUDA driver version the facade reports (cuDriverGetVersion).
int remora_core_driver_version(int* version);
// The server's kernel-mode driver version ("580.159.04", NUL-terminated in `out` of `size`
// bytes); an empty string when it has none (the host-emulated backend).
int remora_core_kernel_driver_version(char* out, unsigned size);

#ifdef __cplusplus
}
#endif
