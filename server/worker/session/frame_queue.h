// FrameQueue: request frames the executor read but cannot dispatch yet, because an
// operation holds the queue (stream order across a transfer that is only partly issued).
// They are kept in arrival order; the bulk of the last one is read ahead into memory
// ("spilled", within a budget) so that frames behind it - a callbackDone the holding
// operation may be waiting for - still arrive. Past the budget the bulk stays in the
// transport and reading stops. When a spilled frame is dispatched, its bulk is served from
// memory by PollBulk as if it came from the transport. Executor thread only; borrows the
// Connection.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "remora/protocol/connection.h"

namespace remora::worker {

class FrameQueue {
 public:
  struct Frame {
    FrameHeader header;
    std::vector<uint64_t> body;
    std::vector<std::byte> bulk;  // spilled bulk
    bool spilled = false;
    InFrame view() const { return InFrame{header, {body.data(), body.size()}}; }
  };

  // `spill_budget`: bytes of kept frames' bulk read ahead at most (--session-limit spill-bytes).
  explicit FrameQueue(Connection& conn, uint64_t spill_budget = 64ull << 20)
      : conn_(conn), spill_budget_(spill_budget) {}

  bool empty() const { return backlog_.empty(); }
  size_t size() const { return backlog_.size(); }
  // The last kept frame's bulk is still in the transport: no further frame can be read.
  bool blocked() const { return bulk_in_transport_; }
  bool spilling() const { return spilling_; }

  // Keeps a frame (read from the transport, whose bulk follows) for later, in order.
  void Push(const InFrame& frame);
  // Reads more of the last kept frame's bulk; true once all of it is in memory.
  Result<bool> Spill();
  // The oldest kept frame (not empty()).
  const Frame& front() const { return backlog_.front(); }
  // The oldest kept frame, for dispatch; its spilled bulk becomes what PollBulk serves.
  Result<Frame> Pop();
  // Puts a popped frame without bulk back at the head (its dispatch was deferred).
  void PushFront(Frame f) { backlog_.push_front(std::move(f)); }

  // The bulk of the frame being dispatched, chunk by chunk in order (nullopt: not yet
  // arrived), and its release once nothing reads a chunk any more.
  Result<std::optional<BulkChunk>> PollBulk();
  void ReleaseBulk(const BulkChunk& chunk);

 private:
  Connection& conn_;
  uint64_t spill_budget_;
  std::deque<Frame> backlog_;
  bool bulk_in_transport_ = false;
  bool spilling_ = false;
  uint64_t spill_filled_ = 0;
  uint64_t spilled_bytes_ = 0;  // held by kept frames
  std::vector<std::byte> replay_;
  uint64_t replay_polled_ = 0, replay_released_ = 0;
};

}  // namespace remora::worker
