// The worker's end of module queries that the driver answers only by enumeration
// (protocol/api/cuda.api, `worker=ModuleKernelNames`): the names of a loaded module's kernels,
// for cuModuleGetFunctionCount/EnumerateFunctions and cuLibraryGetKernelCount/EnumerateKernels
// in the client. Executor thread only.
#pragma once

#include <cuda.h>

#include <cstddef>

namespace remora::worker {

class OpContext;

// The session's module `module`'s kernel names, each NUL-terminated, into `names` (at most
// `capacity` bytes); *length: the bytes all of them take (more than capacity: ask again).
CUresult ModuleKernelNames(OpContext& x, unsigned long long module, char* names, size_t capacity, size_t* length);

}  // namespace remora::worker
