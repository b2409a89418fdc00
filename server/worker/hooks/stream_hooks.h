// The worker's ends of stream and event creation and destruction (protocol/api/cuda.api,
// `wcall=`): what the driver creates is entered in the session's tables (which release it at
// the session's end) and the client gets the table's handle; the session's limits
// (--session-limit streams= / events=) answer CUDA_ERROR_OUT_OF_MEMORY naming the limit.
// Executor thread only; the call's GPU is current (OpContext::Ready).
#pragma once

#include <cuda.h>

#include "remora/base/status.h"

namespace remora::worker {

class OpContext;

// flags: CU_STREAM_DEFAULT or CU_STREAM_NON_BLOCKING. *stream: the session's handle.
Status StreamCreate(OpContext& x, CUstream* stream, unsigned int flags, int priority);
// `stream`: the driver's stream the argument named (a session stream, never a default one).
// Like CUDA's, returns at once; work already queued on it still completes.
Status StreamDestroy(OpContext& x, CUstream stream);
// flags: CU_EVENT_BLOCKING_SYNC, _DISABLE_TIMING, _INTERPROCESS (which needs DISABLE_TIMING).
Status EventCreate(OpContext& x, CUevent* event, unsigned int flags);
// An exported event's IPC handle opens nothing once this returns.
Status EventDestroy(OpContext& x, CUevent event);

}  // namespace remora::worker
