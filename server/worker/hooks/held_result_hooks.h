// The worker's ends of remoraHeldResultPiece and remoraStageArgsPiece (protocol/api/cuda.api):
// a piece of a generated call's results that were too large for their reply, and a piece of
// arguments too large for a request (session/held_results.h). Executor thread only.
#pragma once

#include <cuda.h>

#include <cstddef>

namespace remora::worker {

class OpContext;

// Copies `size` bytes at `offset` of held result `id` into `bytes` (dropping the result once
// its last byte is read). CUDA_ERROR_INVALID_VALUE for an unknown result, a range outside it
// or a piece over HeldResults::kPieceBytes. `device`: the device the call ran on, which chose
// this worker (unused here).
CUresult HeldResultPiece(OpContext& x, int device, unsigned long long id, unsigned long long offset, void* bytes, size_t size);
// Appends a piece to staged arguments `id` of `total` bytes (session/held_results.h,
// StagedArgs). Posted: a refused piece is the session's deferred error, and the call naming
// the arguments is then refused as incomplete. CUDA_ERROR_INVALID_VALUE for a piece out of
// order, beyond its total or over HeldResults::kPieceBytes; CUDA_ERROR_OUT_OF_MEMORY past the
// session's bound.
CUresult StageArgsPiece(OpContext& x, int device, unsigned long long id, unsigned long long total, unsigned long long offset,
                        size_t size, const void* bytes);

}  // namespace remora::worker
