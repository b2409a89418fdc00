// Client hooks of the driver's object lifetimes named by protocol/api/cuda.api (`mirror=`,
// `answer_if=`), defined beside the runtime's calls (shim/src/api_stream.cc,
// api_memory2d.cc): the process's tables (Runtime) follow what the worker created and ended.
// Thread-safe.
#pragma once

#include <cuda.h>

namespace remora::gen::cuda {

// After the worker created it: *phStream is the calling thread's current device's, with
// these flags and priority (answered in the client by cudaStreamGetFlags/GetPriority/GetDevice).
void StreamCreated(CUstream* phStream, unsigned int flags, int priority);
// After its destruction went out: the stream is no longer a live stream of this process.
void StreamDestroyed(CUstream stream);
void EventCreated(CUevent* phEvent, unsigned int flags);
// After its destruction went out (or, shared, succeeded): no longer an event of this
// process, nor shared with others.
void EventDestroyed(CUevent event);
// Whether the event is shared with other processes (exported or opened through IPC): its
// destruction is then waited for, so that the export is revoked when the call returns
// (another process told next to open it is refused). Asks only; EventDestroyed forgets.
bool EventShared(CUevent event);

// After a pitched allocation (shim/src/api_memory2d.cc): its rows are device memory of the
// calling thread's current device in the client's table.
void PitchAllocated(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height, unsigned int elementSize);

}  // namespace remora::gen::cuda
