// CUDA IPC in the client (shim/src/api_ipc.cc): the hooks protocol/api/cuda.api names
// (`mirror=`), and the calls both the runtime and the driver facade go down to.
#pragma once

#include <cuda.h>

#include "remora/base/status.h"

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

// The IPC calls both ABIs answer (cudaIpc* and the driver facade's cuIpc* call down to these,
// converting the Status at their boundary); `call` names the entry point. Memory and events
// are opened on the calling thread's current device. Thread-safe.
// Opens another process's exported memory (opens of one handle share a mapping; the last
// close ends it).
Status OpenIpcMemory(CUipcMemHandle handle, unsigned int flags, const char* call, CUdeviceptr* p);
Status CloseIpcMemory(CUdeviceptr p, const char* call);
// Exports an event; its records are fenced from then on (IpcRecordFence).
Status ExportIpcEvent(CUevent event, const char* call, CUipcEventHandle* handle);
// Opens another process's exported event as an event of this process.
Status OpenIpcEvent(CUipcEventHandle handle, const char* call, CUevent* event);

}  // namespace remora::shim
