// Readings of the physical GPUs for /metrics: utilisation and memory in use, from NVML
// (libnvidia-ml.so.1, part of the NVIDIA driver), loaded at run time. NVML is the driver's
// management library: it creates no CUDA context, so the supervisor still never initialises
// CUDA. Only the cuda backend has it; without it, or for a GPU NVML does not know, the
// readings are absent and /metrics leaves those series out.
// Thread-compatible: one owner (the metrics endpoint's thread).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "remora/base/status.h"
#include "supervisor/metrics.h"

namespace remora::server {

class GpuTelemetry {
 public:
  virtual ~GpuTelemetry() = default;
  // Loads and initialises NVML; an error says why it is unavailable.
  static Result<std::unique_ptr<GpuTelemetry>> LoadNvml();
  // One sample per bus id (cuDeviceGetPCIBusId's spelling), with what NVML could read.
  virtual std::vector<GpuSample> Sample(const std::vector<std::string>& pci_bus_ids) = 0;
};

}  // namespace remora::server
