// The executor side of an in-process transport that plays a script of frames (the fuzz
// target `request`), in the pipe transport's manner but with the script choosing how bulk is
// cut into chunks. It holds the executor to the Connection contract - a violation is a
// finding - and checks what the worker sends back: every reply and notice must decode, and a
// reply must answer a request that was sent, once.
#pragma once

#include <deque>
#include <set>
#include <string>
#include <vector>

#include "bulk_buffer.h"
#include "remora/protocol/connection.h"

namespace remora::fuzz {

struct ScriptedFrame {
  FrameHeader header;
  std::vector<uint64_t> body;
  BulkBuffer bulk;
  size_t chunk = 1 << 20;  // bulk arrives in pieces of this size
};

class ScriptedConnection final : public Connection {
 public:
  // `inline_bulk_limit` selects which transport the executor believes it serves.
  ScriptedConnection(std::deque<ScriptedFrame> frames, uint64_t inline_bulk_limit);

  const Capabilities& capabilities() const override { return caps_; }
  std::string Describe() const override { return "fuzz script"; }

  // Requester side: not used by the executor.
  Status Send(const OutFrame&, ConstBytes, MutableBytes) override { return Unsupported(); }
  Result<InFrame> Receive(int) override { return Unsupported(); }
  Status ReceiveBulk(MutableBytes) override { return Unsupported(); }

  void SetStaging(StagingAllocator*) override {}
  std::vector<SharedRegion> SharedRegions() const override { return {}; }
  // The script's frames in order, then kDevicesUnavailable (the client left).
  Result<std::optional<InFrame>> Poll() override;
  Result<std::optional<BulkChunk>> PollBulkChunk() override;
  void ReleaseBulkChunk(const BulkChunk& chunk) override;
  Status Post(const OutFrame& frame, uint64_t bulk_bytes) override;
  Result<std::optional<BulkChunk>> AcquireBulkChunk(size_t max) override;
  Status CommitBulkChunk(const BulkChunk& chunk, size_t bytes) override;
  Result<bool> Progress() override { return false; }
  void WaitForActivity(int64_t) override {}

  uint64_t replies() const { return replies_; }

 private:
  static Status Unsupported() { return Status(Err::kNotSupported, "requester side of a fuzz script"); }
  void CheckOutgoing(const OutFrame& frame);

  Capabilities caps_;
  std::deque<ScriptedFrame> script_;
  ScriptedFrame current_;
  bool have_current_ = false;
  uint64_t bulk_given_ = 0, bulk_released_ = 0;
  std::deque<BulkChunk> outstanding_;
  std::set<uint64_t> sent_tags_, answered_tags_;
  // The frame being posted with bulk.
  uint64_t out_bulk_total_ = 0, out_bulk_acquired_ = 0, out_bulk_committed_ = 0;
  std::deque<BulkBuffer> out_chunks_;  // acquired, not yet committed
  uint64_t replies_ = 0;
};

}  // namespace remora::fuzz
