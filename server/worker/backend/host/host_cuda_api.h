// The host-emulated backend's driver-API table (gen::cuda::Api): the generated calls it can
// answer without a GPU, over the host Driver's streams, events, pools and limits, plus the
// per-context and per-stream settings it keeps itself. Everything else answers
// CUDA_ERROR_NOT_SUPPORTED (the generated default). Used by the executor's single thread.
#pragma once

#include <memory>

#include "worker/backend/driver.h"

namespace remora::worker {

class HostGraphs;
namespace host {
class HostMemory;
}

// `driver` is the host Driver that owns this table, `memory` its device memory and `graphs`
// its emulated graphs (all must outlive it).
std::unique_ptr<gen::cuda::Api> MakeHostCudaApi(Driver& driver, host::HostMemory& memory, HostGraphs& graphs);

}  // namespace remora::worker
