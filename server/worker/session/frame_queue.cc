#include "worker/session/frame_queue.h"

#include <algorithm>
#include <cstring>

namespace remora::worker {

namespace {
constexpr uint64_t kReplayChunkBytes = 1 << 20;
}  // namespace

void FrameQueue::Push(const InFrame& frame) {
  Frame f{frame.header, std::vector<uint64_t>(frame.body.begin(), frame.body.end()), {}, false};
  uint64_t bulk = frame.header.bulk_bytes;
  if (bulk > 0 && bulk <= spill_budget_ && spilled_bytes_ <= spill_budget_ - bulk) {
    f.spilled = true;
    f.bulk.resize(bulk);
    spilled_bytes_ += bulk;
    spilling_ = true;
    spill_filled_ = 0;
  } else if (bulk > 0) {
    bulk_in_transport_ = true;
  }
  backlog_.push_back(std::move(f));
}

Result<bool> FrameQueue::Spill() {
  std::vector<std::byte>& dst = backlog_.back().bulk;
  while (spill_filled_ < dst.size()) {
    ASSIGN_OR_RETURN(std::optional<BulkChunk> c, conn_.PollBulkChunk());
    if (!c) return false;
    if (c->offset != spill_filled_ || c->size > dst.size() - spill_filled_)
      return Error(Err::kInvalidValue, "bulk chunk out of order or past the frame's bulk");
    std::memcpy(dst.data() + spill_filled_, c->data, c->size);
    spill_filled_ += c->size;
    conn_.ReleaseBulkChunk(*c);
  }
  spilling_ = false;
  return true;
}

Result<FrameQueue::Frame> FrameQueue::Pop() {
  Frame f = std::move(backlog_.front());
  backlog_.pop_front();
  if (f.spilled) {
    spilled_bytes_ -= f.bulk.size();
    if (replay_released_ < replay_.size())
      return Error(Err::kUnknown, "internal: spilled bulk replayed while the previous one is in use");
    replay_ = std::move(f.bulk);
    replay_polled_ = replay_released_ = 0;
  } else if (f.header.bulk_bytes > 0) {
    bulk_in_transport_ = false;
  }
  return f;
}

Result<std::optional<BulkChunk>> FrameQueue::PollBulk() {
  if (replay_polled_ < replay_.size()) {
    size_t n = std::min<uint64_t>(kReplayChunkBytes, replay_.size() - replay_polled_);
    BulkChunk c{replay_.data() + replay_polled_, n, replay_polled_, 0};
    replay_polled_ += n;
    return std::optional<BulkChunk>(c);
  }
  if (!replay_.empty()) return std::optional<BulkChunk>();  // the op wants more than was sent
  return conn_.PollBulkChunk();
}

void FrameQueue::ReleaseBulk(const BulkChunk& chunk) {
  if (!replay_.empty() && chunk.data >= replay_.data() && chunk.data < replay_.data() + replay_.size()) {
    replay_released_ += chunk.size;
    if (replay_released_ >= replay_.size()) {
      replay_.clear();
      replay_.shrink_to_fit();
      replay_polled_ = replay_released_ = 0;
    }
    return;
  }
  conn_.ReleaseBulkChunk(chunk);
}

}  // namespace remora::worker
