// The worker's ends of a device's pitched memory, peer copies, memory pools and peer access
// (protocol/api/cuda.api, `wcall=`): what this session allocates or creates is entered in its
// tables (released at its end), memory charged to the tenant and pools counted against
// --session-limit pools=. Executor thread only; the call's GPU is current (Ready).
#pragma once

#include <cuda.h>

#include <cstddef>

#include "remora/base/status.h"

namespace remora::worker {

class OpContext;

// Width x Height bytes of rows `*pitch` apart (ElementSizeBytes 4, 8 or 16, as CUDA's); a
// zero extent allocates nothing (*dptr 0). A bound (a pitch of at most 512 more) is charged
// first, then settled to what the driver laid out.
Status MemAllocPitch(OpContext& x, CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height,
                     unsigned int elementSize);
// `size` bytes from `src` (memory of GPU srcDevice) to `dst` (of dstDevice) in `stream`'s
// order; refused if a pointer is not memory of the device named with it.
Status MemcpyPeer(OpContext& x, CUstream stream, CUdeviceptr dst, int dstDevice, CUdeviceptr src, int srcDevice,
                  size_t size);
// `device`: the server's GPU the argument named. *pool: the session's handle.
Status PoolCreate(OpContext& x, CUmemoryPool* pool, int device, size_t maxSize, unsigned int handleTypes);
// `pool`: the driver's pool the argument named; only one this session created.
Status PoolDestroy(OpContext& x, CUmemoryPool pool);
// Enables (enable 1) or disables (0) `device`'s access to `peer`'s memory (another device).
Status PeerAccess(OpContext& x, int device, int peer, unsigned int enable);

}  // namespace remora::worker
