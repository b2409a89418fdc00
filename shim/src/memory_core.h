// Device memory as both ABIs answer it: the runtime's cudaMalloc, cudaFree and cudaMemGetInfo
// and the driver facade's cuMemAlloc, cuMemFree, cuMemGetInfo (and the freeing of a destroyed
// context's memory) call down to these and convert the Status at their own boundary. On the
// calling thread's current device; any thread.
#pragma once

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

}  // namespace remora::shim
