// HeldResults: a generated call's results too large for one reply frame (cuSOLVER's host
// factor extractions: megabytes in one call), held by the worker until the client has read
// them in pieces (protocol/api/cuda.api, remoraHeldResultPiece: hooks/held_result_hooks.h; docs/PROTOCOL.md, "Large
// results"). A result is dropped once its last byte is read, or with the session.
// Executor thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "remora/base/status.h"
#include "remora/protocol/api_args.h"

namespace remora::worker {

class HeldResults {
 public:
  static constexpr uint64_t kInlineBytes = api::kInlineResultBytes;  // (api_args.h)
  static constexpr uint64_t kPieceBytes = api::kHeldPieceBytes;
  // At most this many bytes held at once for one session (clients read theirs at once; a
  // client that does not holds memory of the worker's, never more than this).
  static constexpr uint64_t kMaxBytes = api::kMaxHeldResultBytes;

  // Holds `bytes`; the id the client reads them by. kMemoryAllocation past kMaxBytes.
  Result<uint64_t> Hold(std::vector<std::byte> bytes);
  // Copies `size` bytes at `offset` of result `id` into `dst`; the result is dropped once its
  // last byte has been read. kInvalidValue: no such result, or a range outside it.
  Status Read(uint64_t id, uint64_t offset, void* dst, uint64_t size);
  uint64_t bytes() const { return bytes_; }

 private:
  std::map<uint64_t, std::vector<std::byte>> held_;
  uint64_t next_ = 1;
  uint64_t bytes_ = 0;
};
// StagedArgs: a generated call's arguments too large for one request frame, sent ahead by the
// client in pieces (remoraStageArgsPiece, posted) and taken by the call that names them
// (ApiCall.stagedArgs; docs/PROTOCOL.md, "Large arguments"). Dropped when taken, or with the
// session. Executor thread only.
class StagedArgs {
 public:
  static constexpr uint64_t kMaxBytes = api::kMaxStagedArgBytes;

  // Appends a piece to staged arguments `id`: the first piece (offset 0) opens them with their
  // `total` size; each later one must continue where the last ended, within `total`.
  // kInvalidValue for a piece out of order or beyond its total, kMemoryAllocation past kMaxBytes.
  Status Write(uint64_t id, uint64_t total, uint64_t offset, const void* bytes, uint64_t size);
  // The complete arguments `id`, moved out. kInvalidValue: no such id, or not all sent.
  Result<std::vector<std::byte>> Take(uint64_t id);
  uint64_t bytes() const { return bytes_; }

 private:
  struct Entry {
    std::vector<std::byte> bytes;  // reserved to total, filled up to its size
    uint64_t total = 0;
  };
  std::map<uint64_t, Entry> staged_;
  uint64_t bytes_ = 0;  // totals of the staged entries
};

}  // namespace remora::worker
