// The worker's ends of a device's memory pools and peer access (protocol/api/cuda.api,
// `wcall=`): pools this session creates are entered in its table (released at its end) and
// counted against --session-limit pools=. Executor thread only.
#pragma once

#include <cuda.h>

#include <cstddef>

#include "remora/base/status.h"

namespace remora::worker {

class OpContext;

// `device`: the server's GPU the argument named. *pool: the session's handle.
Status PoolCreate(OpContext& x, CUmemoryPool* pool, int device, size_t maxSize, unsigned int handleTypes);
// `pool`: the driver's pool the argument named; only one this session created.
Status PoolDestroy(OpContext& x, CUmemoryPool pool);
// Enables (enable 1) or disables (0) `device`'s access to `peer`'s memory (another device).
Status PeerAccess(OpContext& x, int device, int peer, unsigned int enable);

}  // namespace remora::worker
