// The descriptors Remora hands an application for CUDA's POSIX-descriptor shareable handles
// (cuMemExportToShareableHandle, cudaMemPoolExportToShareableHandle). The driver's own
// descriptor never leaves the server (the supervisor keeps it); the application gets a
// sealed memory file holding the export's 64-byte capability, which it may pass to another
// process as it would the driver's descriptor (SCM_RIGHTS, inheritance), and which the
// import reads back and the server checks (same server, same tenant, live export).
// Thread-safe (no state).
#pragma once

#include <cuda.h>

#include "remora/base/status.h"

namespace remora::shim {

// What a shareable handle shares: physical memory of cuMemCreate, or a memory pool.
enum class ShareableKind : char { kPhysical = 'M', kPool = 'P' };

// A new descriptor (close-on-exec, the caller's to close) holding `capability`.
Result<int> WriteShareableHandle(ShareableKind kind, const CUipcMemHandle& capability);
// The capability in descriptor `fd` (left open), or kInvalidValue if it is not a shareable
// handle of `kind` made by WriteShareableHandle.
Result<CUipcMemHandle> ReadShareableHandle(ShareableKind kind, int fd);

}  // namespace remora::shim
