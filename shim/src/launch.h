// A kernel launch as both the runtime's and the driver's entry points post it: checked as the
// runtime would before enqueuing (so configuration errors come from the launch itself), the
// parameters packed at the offsets the worker reported, sent without waiting. Thread-safe.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "registry.h"
#include "remora/base/status.h"

namespace remora::shim {

struct Launch {
  dim3 grid, block;
  size_t shared_mem = 0;
  cudaStream_t stream = nullptr;
  bool per_thread = false;
  bool cooperative = false;
  const cudaLaunchAttribute* attrs = nullptr;  // cudaLaunchAttribute and CUlaunchAttribute agree
  unsigned num_attrs = 0;
};

// Launches `k` on `device` (the stream's device), after the managed memory the host wrote and
// the sleeping pinned memory the parameters point into (managed.h) reach the device. `args`
// holds one pointer per parameter (kernelParams), or `packed` (`packed_bytes`) is the
// parameter buffer itself (the driver's CU_LAUNCH_PARAM_BUFFER_POINTER).
Status PostLaunch(int device, const KernelInfo& k, const Launch& l, void** args, const void* packed = nullptr,
                  size_t packed_bytes = 0);

}  // namespace remora::shim
