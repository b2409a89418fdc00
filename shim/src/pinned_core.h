// Pinned host memory as both ABIs answer it: the runtime's cudaMallocHost, cudaHostAlloc,
// cudaFreeHost, cudaHostRegister/Unregister, cudaHostGetDevicePointer and cudaHostGetFlags and
// the driver facade's cuMemAllocHost, cuMemHostAlloc, cuMemFreeHost, cuMemHostRegister/
// Unregister, cuMemHostGetDevicePointer and cuMemHostGetFlags call down to these
// (api_pinned.cc) and convert the Status at their own boundary. `call` names the entry point.
// Any thread.
#pragma once

#include <cstddef>
#include <cstdint>

#include "remora/base/status.h"

namespace remora::shim {

// Pinned memory of `size` bytes (cudaHostAlloc's flags; the driver's CU_MEMHOSTALLOC_* have the
// same values): shared with the worker where the transport shares memory; over tcp, small or
// mapped allocations are sleeping device memory (managed.h). *ptr is NULL for a size of 0.
Status AllocatePinned(size_t size, unsigned flags, const char* call, void** ptr);
// Frees what AllocatePinned returned (NULL: nothing); waits for the work that may still use it.
Status FreePinned(void* ptr);
// Registers application memory as pinned (with the transport where it can use it in place).
Status RegisterHost(void* ptr, size_t size, unsigned flags);
Status UnregisterHost(void* ptr);
// The device address of pinned memory (flags must be 0).
Status PinnedDevicePointer(void* host, unsigned flags, void** device);
// The flags pinned memory was allocated or registered with.
Status PinnedFlags(void* host, unsigned* flags);

}  // namespace remora::shim
