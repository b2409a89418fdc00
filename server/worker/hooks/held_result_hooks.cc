#include "worker/hooks/held_result_hooks.h"

#include "worker/calls/generated_call.h"
#include "worker/session/executor.h"
#include "worker/session/held_results.h"
#include "worker/session/peer_log.h"

namespace remora::worker {

CUresult HeldResultPiece(OpContext& x, int, unsigned long long id, unsigned long long offset, void* bytes, size_t size) {
  Status st = size > HeldResults::kPieceBytes
                  ? Error(Err::kInvalidValue, "a piece of {} bytes: at most {} at a time", size, HeldResults::kPieceBytes)
                  : x.executor().session().held_results().Read(id, offset, bytes, size);
  if (st.ok()) return CUDA_SUCCESS;
  LOG_PEER(PeerLog(), Info, "remoraHeldResultPiece: {}", st.message());
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult StageArgsPiece(OpContext& x, int, unsigned long long id, unsigned long long total, unsigned long long offset,
                        size_t size, const void* bytes) {
  Status st = size > HeldResults::kPieceBytes
                  ? Error(Err::kInvalidValue, "a piece of {} bytes: at most {} at a time", size, HeldResults::kPieceBytes)
              : bytes == nullptr && size != 0 ? Error(Err::kInvalidValue, "a piece of {} bytes without them", size)
                                              : x.executor().session().staged_args().Write(id, total, offset, bytes, size);
  if (st.ok()) return CUDA_SUCCESS;
  LOG_PEER(PeerLog(), Info, "remoraStageArgsPiece: {}", st.message());
  return st.code() == Err::kMemoryAllocation ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
}

}  // namespace remora::worker
