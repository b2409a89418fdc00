// Client hooks of CUDA IPC named by protocol/api/cuda.api (`mirror=`), defined in
// shim/src/api_ipc.cc.
#pragma once

#include <cuda.h>

namespace remora::gen::cuda {

// After cuEventRecord[WithFlags] went out: when the event is shared with other processes (an
// IPC event this process exported or opened), waits until the worker has applied the record.
// CUDA's record has happened in the driver when the call returns, and an application may at
// once tell another process to wait for it; a record merely posted to this session's worker
// could reach the GPU after that process's wait. Other events are not waited for.
void IpcRecordFence(CUevent event, CUstream stream);
void IpcRecordFenceFlags(CUevent event, CUstream stream, unsigned int flags);

}  // namespace remora::gen::cuda

namespace remora::shim {

// Whether `event` is shared with other processes (exported or opened here). cudaEventDestroy
// of such an event waits for the worker, so its export is revoked when the call returns.
bool IsIpcEvent(CUevent event);
// Forgets `event` as shared (it was destroyed).
void ForgetIpcEvent(CUevent event);

}  // namespace remora::shim
