// The worker's ends of module calls (protocol/api/cuda.api): the names of a loaded module's
// kernels (the driver answers them only by enumeration), for cuModuleGetFunctionCount/
// EnumerateFunctions and cuLibraryGetKernelCount/EnumerateKernels in the client; and the
// unloading of a module. Executor thread only.
#pragma once

#include <cuda.h>

#include <cstddef>

#include "remora/base/status.h"

namespace remora::worker {

class OpContext;

// The session's module `module`'s kernel names, each NUL-terminated, into `names` (at most
// `capacity` bytes); *length: the bytes all of them take (more than capacity: ask again).
CUresult ModuleKernelNames(OpContext& x, unsigned long long module, char* names, size_t capacity, size_t* length);
// Unloads the module the argument named once the GPU work queued before this call is done:
// cuModuleUnload waits for the GPU in the driver, which must not block the executor (a host
// function waiting for the client would never finish). Answered then (the call's reply is
// the pending operation's); its functions, variables and charges go with it.
Status ModuleUnload(OpContext& x, CUmodule module);

}  // namespace remora::worker
