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
// A strided copy (api_memory2d.cc): `depth` slices of `height` rows of `width` bytes; rows
// `pitch` apart, slices `rows` rows apart on each side.
cudaError_t CopyStrided(void* dst, size_t dpitch, size_t drows, const void* src, size_t spitch, size_t srows,
                        size_t width, size_t height, size_t depth, cudaMemcpyKind kind, cudaStream_t stream,
                        bool per_thread, bool async, const char* call);
// cudaMemcpyPeer[Async]: asynchronous with respect to the host either way.
cudaError_t MemcpyPeer(void* dst, int dst_device, const void* src, int src_device, size_t count, cudaStream_t stream,
                       bool async, const char* call);

}  // namespace remora::shim
