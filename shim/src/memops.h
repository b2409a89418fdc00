// Copies and memsets shared by the memory, symbol and 2D/3D entry points.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "remora/base/status.h"

namespace remora {
struct Allocation;
}

namespace remora::shim {

class Client;

enum class Side { kHost, kDevice };
// Where a pointer lives: device memory if it is in one of this process's device
// allocations (unified addressing, as cudaMemcpyDefault assumes), the host otherwise.
Side Classify(const void* p);

// A copy with cudaMemcpy[Async]'s CUDA semantics (see api_memcpy.cc), for both ABIs: the
// driver's cuMemcpy* take the kind their name says. A synchronous copy (`async` false) ends
// with AfterSync's steps when it waited for the device.
Status CopyMemory(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t stream, bool per_thread,
                  bool async);
// A memset in stream order (cudaMemset[Async], cuMemsetD8[Async]); asynchronous with respect
// to the host for device memory.
Status SetMemory(void* dst, int value, size_t n, cudaStream_t stream, bool per_thread);
// The runtime's conversions of the two: `call` names the entry point for errors and logs.
cudaError_t Memcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t stream, bool per_thread,
                   bool async, const char* call);
cudaError_t Memset(void* dst, int value, size_t n, cudaStream_t stream, bool per_thread, const char* call);
// A strided copy (api_memory2d.cc): `depth` slices of `height` rows of `width` bytes; rows
// `pitch` apart, slices `rows` rows apart on each side. For both ABIs (cudaMemcpy2D/3D,
// cuMemcpy2D/3D without arrays); the runtime's conversion below.
Status CopyStridedMemory(void* dst, size_t dpitch, size_t drows, const void* src, size_t spitch, size_t srows, size_t width,
                         size_t height, size_t depth, cudaMemcpyKind kind, cudaStream_t stream, bool per_thread, bool async);
cudaError_t CopyStrided(void* dst, size_t dpitch, size_t drows, const void* src, size_t spitch, size_t srows,
                        size_t width, size_t height, size_t depth, cudaMemcpyKind kind, cudaStream_t stream,
                        bool per_thread, bool async, const char* call);
// Pinned memory the worker can reach (api_pinned.cc): a sealed memfd mapped here and there at
// one address, registered with the driver on the worker's side; *p its address here. Returns
// the region id, or 0 if the transport cannot share memory (the caller then uses plain memory
// and the copies are staged). Any thread.
uint64_t ShareWithWorker(Client* c, void** p, size_t bytes);
// Pinned allocations shared with the worker keep their region id in the upper half of the
// table's cookie (the lower half holds the cudaHostAlloc flags); 0: not shared.
uint64_t RegionOf(const Allocation& a);
// cudaMemcpyPeer[Async] and cuMemcpyPeer[Async]: asynchronous with respect to the host either
// way; `call` names the entry point.
Status CopyPeerMemory(void* dst, int dst_device, const void* src, int src_device, size_t count, cudaStream_t stream,
                      const char* call);
// The runtime's conversion of it.
cudaError_t MemcpyPeer(void* dst, int dst_device, const void* src, int src_device, size_t count, cudaStream_t stream,
                       bool async, const char* call);

}  // namespace remora::shim
