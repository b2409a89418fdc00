// Copies and memsets shared by the memory, symbol and 2D/3D entry points.
#pragma once

#include <cuda_runtime_api.h>

namespace remora::shim {

enum class Side { kHost, kDevice };
// Where a pointer lives: device memory if it is in one of this process's device
// allocations (unified addressing, as cudaMemcpyDefault assumes), the host otherwise.
Side Classify(const void* p);

// cudaMemcpy[Async] with its CUDA semantics (see api_memory.cc); `call` names the entry
// point for errors and logs.
cudaError_t Memcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t stream, bool per_thread,
                   bool async, const char* call);
cudaError_t Memset(void* dst, int value, size_t n, cudaStream_t stream, bool per_thread, const char* call);

}  // namespace remora::shim
