// This process's GPU memory as NVML sees it (context, allocations, pools, modules): what
// the worker reports as a session's context overhead, by subtracting what the ledger charges.
// NVML (libnvidia-ml.so.1, part of the driver) is loaded at run time; without it, or where
// it cannot see this process (a PID namespace), every query says so and nothing is reported.
// Thread-compatible: one owner (the driver backend).
#pragma once

#include <memory>
#include <string>

#include "remora/base/status.h"

namespace remora::worker {

class NvmlProbe {
 public:
  virtual ~NvmlProbe() = default;
  // Loads and initialises NVML; an error says why it is unavailable.
  static Result<std::unique_ptr<NvmlProbe>> Load();
  // Bytes this process holds on the GPU at `pci_bus_id` (as cuDeviceGetPCIBusId writes it).
  virtual Result<uint64_t> ProcessMemory(const std::string& pci_bus_id) = 0;
};

}  // namespace remora::worker
