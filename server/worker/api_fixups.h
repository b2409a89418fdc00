// Hand-written argument hooks that protocol/api/cuda.api names (`fixup(Hook)`, or
// `fixup=Hook` on an in/array argument): they turn what the application wrote inside a
// structure into what the server's driver takes, refusing what the session may not name.
#pragma once

#include <cuda.h>

#include "remora/base/status.h"
#include "worker/api_vmm.h"

namespace remora::worker {

class OpContext;

// A memory location: a device's id is the application's ordinal, made the server's GPU (and
// the GPU the call runs on). Host locations are refused: a pool of the server's host memory
// is of no use to a remote client.
Status FixMemLocation(OpContext& x, CUmemLocation* location);
// An access descriptor: its location, as above.
Status FixAccessDesc(OpContext& x, CUmemAccessDesc* desc);
// Allocation properties (cuMemCreate, granularity): their location, as above.
Status FixAllocationProp(OpContext& x, CUmemAllocationProp* prop);

}  // namespace remora::worker
