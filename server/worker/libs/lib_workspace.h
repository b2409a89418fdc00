// Device memory the worker gives a library object for the library's own use (a cuBLAS
// handle's workspace, a cuFFT plan's work area): charged to the tenant before it is
// allocated, freed and returned when the object ends (OpContext::ForgetObject, the session's
// end). Used by the executor's single thread.
#pragma once

#include <cstdint>

#include "remora/base/status.h"

namespace remora::worker {

class OpContext;
struct LibObject;

// Gives `object` a workspace of `bytes` on the call's GPU. When the quota or the GPU
// refuses it, the object is destroyed and the call fails with `nomem` of `domain`.
Status GiveWorkspace(OpContext& x, LibObject* object, uint64_t bytes, Domain domain, uint32_t nomem);

}  // namespace remora::worker
