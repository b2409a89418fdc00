// Hand-written argument hooks that protocol/api/cuda.api names (`fixup(Hook)`, or
// `fixup=Hook` on an in/array argument): they turn what the application wrote inside a
// structure into what the server's driver takes, refusing what the session may not name.
#pragma once

#include <cuda.h>

#include "remora/base/status.h"
#include "worker/hooks/vmm_hooks.h"

namespace remora::worker {

class OpContext;

// A memory location: a device's id is the application's ordinal, made the server's GPU (and
// the GPU the call runs on). Host locations are refused: a pool of the server's host memory
// is of no use to a remote client.
Status FixMemLocation(OpContext& x, CUmemLocation* location);
// An access descriptor: its location, as above.
Status FixAccessDesc(OpContext& x, CUmemAccessDesc* desc);
// A context argument: whatever the client sent, the worker's context of the call's device.
Status CurrentContext(OpContext& x, CUcontext* ctx);
// Allocation properties (cuMemCreate, granularity): their location, as above.
Status FixAllocationProp(OpContext& x, CUmemAllocationProp* prop);

// cuCtxSetLimit: NoteLimit remembers which limit is being set; ChargeLimit charges the
// device memory the driver sets aside for the new value to the tenant like an allocation
// (heap, printf FIFO, stack for every resident thread), refusing it over the tenant's
// budget, and bounds the device-runtime limits. The charge settles with the call: undone if
// the driver refuses it; the old value's charge released once the new one is in force.
Status NoteLimit(OpContext& x, CUlimit* limit);
Status ChargeLimit(OpContext& x, size_t* value);

}  // namespace remora::worker
