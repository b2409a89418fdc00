// The host backend's emulated math libraries, one factory each (host_lib_*.cc); each returns
// its gen::<lib>::Api as a shared_ptr<void> to that Api.
#pragma once

#include <memory>

#include "worker/backend/host/host_device.h"

namespace remora::worker {

std::shared_ptr<void> MakeHostCublas(EmulatedDevice& device);
std::shared_ptr<void> MakeHostCublasLt(EmulatedDevice& device);
std::shared_ptr<void> MakeHostCurand(EmulatedDevice& device);
std::shared_ptr<void> MakeHostCusolver(EmulatedDevice& device);
std::shared_ptr<void> MakeHostCusparse(EmulatedDevice& device);
std::shared_ptr<void> MakeHostCudnn(EmulatedDevice& device);
// NCCL's collectives across emulated GPUs of one server and of several (issue 44; tests only).
std::shared_ptr<void> MakeHostNccl(EmulatedDevice& device);

}  // namespace remora::worker
