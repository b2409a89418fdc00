#include "remora/protocol/frame.h"

namespace remora {

Status ValidateFrameHeader(const FrameHeader& h) {
  if (h.magic != kFrameMagic)
    return Error(Err::kInvalidValue, "bad frame magic 0x{:08x} (not a Remora peer, or a protocol mismatch)", h.magic);
  if (h.kind < static_cast<uint16_t>(FrameKind::kHandshake) || h.kind > static_cast<uint16_t>(FrameKind::kHeartbeat))
    return Error(Err::kInvalidValue, "unknown frame kind {}", h.kind);
  if (h.reserved != 0) return Error(Err::kInvalidValue, "frame reserved field is not zero");
  if (h.body_words == 0 || h.body_words > kMaxBodyWords)
    return Error(Err::kInvalidValue, "frame body of {} words is out of range", h.body_words);
  if (h.bulk_bytes > kMaxBulkBytes) return Error(Err::kInvalidValue, "frame bulk of {} bytes is too large", h.bulk_bytes);
  return Status::Ok();
}

}  // namespace remora
