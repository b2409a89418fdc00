// Device memory as both ABIs answer it: the runtime's cudaMalloc, cudaFree, cudaMemGetInfo and
// stream-ordered allocation (cudaMallocAsync, cudaMallocFromPoolAsync, cudaFreeAsync) and the
// driver facade's cuMemAlloc, cuMemFree, cuMemGetInfo, cuMemAllocAsync,
// cuMemAllocFromPoolAsync and cuMemFreeAsync (and the freeing of a destroyed context's memory)
// call down to these and convert the Status at their own boundary. On the calling thread's
// current device (stream-ordered: the stream's); any thread.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "remora/base/status.h"

namespace remora::shim {

// `size` bytes of the current device's memory, charged to the tenant; *ptr is NULL for 0.
Status AllocateDevice(size_t size, void** ptr);
// Frees device memory of this process (NULL: nothing); managed memory too. Waits for the
// device's work, as CUDA's free does (AfterSync). Pinned and IPC-opened memory are refused.
Status FreeDevice(void* ptr);
// The tenant's view of the current device's memory: free and total bytes.
Status DeviceMemoryInfo(size_t* free, size_t* total);
// `size` bytes in stream order on `stream`'s device, from `pool` (NULL: the device's current
// pool); in a stream capture, the capture's graph allocates it. *ptr is NULL for 0.
Status AllocateAsync(size_t size, cudaMemPool_t pool, cudaStream_t stream, bool per_thread, void** ptr);
// Frees in stream order (NULL: nothing); posted, a failure surfaces at the next synchronisation.
Status FreeAsync(void* ptr, cudaStream_t stream, bool per_thread);

}  // namespace remora::shim
