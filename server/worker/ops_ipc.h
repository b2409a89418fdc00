// The worker's end of CUDA IPC (protocol/api/cuda.api, `worker=Ipc*`; the runtime's cudaIpc*
// reach the same entries). Exports are registered with the supervisor, which gives the
// client's handle; opens are checked there first (server/supervisor/ipc_registry.h), then the
// driver opens the exporter's real handle (cuda) or maps its memory file (host-emulated).
// Executor thread only.
#pragma once

#include <cuda.h>

namespace remora::worker {

class OpContext;

CUresult IpcGetMem(OpContext& x, CUipcMemHandle* handle, CUdeviceptr dptr);
CUresult IpcOpenMem(OpContext& x, CUdeviceptr* dptr, size_t* size, CUipcMemHandle handle, unsigned int flags);
CUresult IpcCloseMem(OpContext& x, CUdeviceptr dptr);
CUresult IpcGetEvent(OpContext& x, CUipcEventHandle* handle, CUevent event);
CUresult IpcOpenEvent(OpContext& x, CUevent* event, CUipcEventHandle handle);

}  // namespace remora::worker
