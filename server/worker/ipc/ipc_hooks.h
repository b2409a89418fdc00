// The worker's end of CUDA IPC (protocol/api/cuda.api, `worker=Ipc*`; the runtime's cudaIpc*
// reach the same entries). Exports are registered with the supervisor, which gives the
// client's handle; opens are checked there first (server/supervisor/ipc_registry.h), then the
// driver opens the exporter's real handle (cuda) or maps its memory file (host-emulated).
// Executor thread only.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <vector>

#include "remora/base/status.h"
#include "worker/session/ipc_link.h"
#include "worker/ipc/ipc_state.h"

namespace remora::worker {

class Executor;
class OpContext;

// Shared by every IPC entry (here, hooks/vmm_hooks.cc, pool_ipc_hooks.cc):
// A worker-side failure as the driver API's result.
CUresult IpcResult(const Status& st);
// Asks the supervisor to open `handle` (of kIpcKind* `kind`) for this session, on one of its
// GPUs: its answer, or the CUresult refusing it.
Result<IpcAnswer> OpenExport(Executor& ex, uint8_t kind, const IpcHandleBytes& handle);
// Registers an export with the supervisor (`real`: the driver's handle bytes; `fd` rides
// along if >= 0): the client's capability and the export id.
Result<IpcState::Export> RegisterExport(Executor& ex, uint8_t kind, int gpu, uint64_t size, uint64_t local_id,
                                        std::vector<uint8_t> real, int fd);

// The session's open import of `handle`, if it has one: opened once more (counted), its
// address and size. False if there is none.
bool ReopenImport(Executor& ex, const IpcHandleBytes& handle, CUdeviceptr* ptr, size_t* size);
// Enters memory the driver opened at `base` for the supervisor's answer `a` into the session:
// an allocation charged to its exporter only, and the import's record (`pool_pointer`: from
// an imported pool, freed rather than closed). False if the range collides with one the
// session has: the caller closes what it opened.
bool AdoptImport(Executor& ex, uint64_t base, const IpcAnswer& a, const IpcHandleBytes& handle, bool pool_pointer);

CUresult IpcGetMem(OpContext& x, CUipcMemHandle* handle, CUdeviceptr dptr);
CUresult IpcOpenMem(OpContext& x, CUdeviceptr* dptr, size_t* size, CUipcMemHandle handle, unsigned int flags);
CUresult IpcCloseMem(OpContext& x, CUdeviceptr dptr);
CUresult IpcGetEvent(OpContext& x, CUipcEventHandle* handle, CUevent event);
CUresult IpcOpenEvent(OpContext& x, CUevent* event, CUipcEventHandle handle);

}  // namespace remora::worker
