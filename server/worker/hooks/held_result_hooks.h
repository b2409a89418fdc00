// The worker's end of remoraHeldResultPiece (protocol/api/cuda.api): a piece of a generated
// call's results that were too large for their reply (session/held_results.h). Executor
// thread only.
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

}  // namespace remora::worker
