// The GPUs of this server. The supervisor never touches CUDA: it asks a worker binary in
// probe mode (see common/worker_args.h).
#pragma once

#include <string>
#include <vector>

#include "remora/base/status.h"

namespace remora::server {

struct GpuInfo {
  int index = 0;          // driver ordinal on this host = server GPU id
  std::string uuid;       // hex
  uint64_t total_memory = 0;
  std::string pci_bus_id;
  std::string name;
  bool mps = false;       // contexts on it are shared through MPS (the daemon runs)
};

struct Inventory {
  std::string backend;    // "cuda" or "host-emulated"
  bool emulated = false;
  int driver_version = 0;
  std::string kernel_driver;  // "580.159.04"; empty when emulated
  std::vector<GpuInfo> gpus;
};

Result<Inventory> ProbeGpus(const std::string& worker_path, const std::vector<std::string>& backend_args);
// Parses probe output (exposed for unit tests).
Result<Inventory> ParseProbe(const std::string& text);

}  // namespace remora::server
