#include "scripted_connection.h"

#include <algorithm>
#include <cstring>

#include "fuzz_input.h"
#include "remora.capnp.h"
#include "remora/protocol/message.h"

namespace remora::fuzz {

ScriptedConnection::ScriptedConnection(std::deque<ScriptedFrame> frames, uint64_t inline_bulk_limit)
    : script_(std::move(frames)) {
  caps_ = {"fuzz", false, false, false, false, inline_bulk_limit};
  for (const ScriptedFrame& f : script_) sent_tags_.insert(f.header.tag);
}

Result<std::optional<InFrame>> ScriptedConnection::Poll() {
  if (have_current_ && (bulk_released_ < current_.bulk.size() || !outstanding_.empty()))
    Finding("the executor polled the next frame before releasing the bulk of this one");
  if (script_.empty()) {
    have_current_ = false;
    return Status(Err::kDevicesUnavailable, "the scripted client left");
  }
  current_ = std::move(script_.front());
  script_.pop_front();
  have_current_ = true;
  bulk_given_ = bulk_released_ = 0;
  return std::optional<InFrame>(InFrame{current_.header, {current_.body.data(), current_.body.size()}});
}

Result<std::optional<BulkChunk>> ScriptedConnection::PollBulkChunk() {
  if (!have_current_ || bulk_given_ >= current_.bulk.size()) return std::optional<BulkChunk>();
  size_t n = std::min<size_t>(std::max<size_t>(current_.chunk, 1), current_.bulk.size() - bulk_given_);
  BulkChunk c{current_.bulk.data() + bulk_given_, n, bulk_given_, static_cast<uint32_t>(outstanding_.size())};
  bulk_given_ += n;
  outstanding_.push_back(c);
  return std::optional<BulkChunk>(c);
}

void ScriptedConnection::ReleaseBulkChunk(const BulkChunk& chunk) {
  if (outstanding_.empty() || outstanding_.front().data != chunk.data || outstanding_.front().size != chunk.size)
    Finding("the executor released a bulk chunk out of order or one it did not get");
  bulk_released_ += chunk.size;
  outstanding_.pop_front();
}

void ScriptedConnection::CheckOutgoing(const OutFrame& frame) {
  Status st = GuardDecode("worker output", [&]() -> Status {
    BodyReader reader(frame.body);
    if (frame.kind == FrameKind::kReply) {
      auto r = reader.Root<wire::Reply>();
      (void)r.totalSize();  // traverses every pointer: the whole message must be well formed
      (void)r.which();
    } else if (frame.kind == FrameKind::kNotice) {
      (void)reader.Root<wire::Notice>().totalSize();
    } else {
      Finding("the worker sent a frame that is neither a reply nor a notice", std::to_string(static_cast<int>(frame.kind)));
    }
    return Status::Ok();
  });
  if (!st.ok()) Finding("the worker sent a message that does not decode", st.message());
  if (frame.kind == FrameKind::kReply) {
    replies_++;
    if (sent_tags_.count(frame.tag) == 0) Finding("a reply to a request that was never sent", std::to_string(frame.tag));
    if (!answered_tags_.insert(frame.tag).second) Finding("two replies to one request", std::to_string(frame.tag));
  } else if (frame.tag != 0) {
    Finding("a notice with a nonzero tag");
  }
}

Status ScriptedConnection::Post(const OutFrame& frame, uint64_t bulk_bytes) {
  if (out_bulk_committed_ < out_bulk_total_) Finding("the executor posted a frame before finishing the previous one's bulk");
  CheckOutgoing(frame);
  out_bulk_total_ = bulk_bytes;
  out_bulk_acquired_ = out_bulk_committed_ = 0;
  return Status::Ok();
}

Result<std::optional<BulkChunk>> ScriptedConnection::AcquireBulkChunk(size_t max) {
  if (out_bulk_acquired_ >= out_bulk_total_) Finding("the executor asked for bulk space beyond the frame's bulk");
  size_t n = std::min<uint64_t>({max, uint64_t{1} << 20, out_bulk_total_ - out_bulk_acquired_});
  if (n == 0) Finding("the executor asked for an empty bulk chunk");
  out_chunks_.emplace_back(n);
  BulkChunk c{out_chunks_.back().data(), n, out_bulk_acquired_, 0};
  out_bulk_acquired_ += n;
  return std::optional<BulkChunk>(c);
}

Status ScriptedConnection::CommitBulkChunk(const BulkChunk& chunk, size_t bytes) {
  if (bytes > chunk.size) Finding("the executor committed more than the chunk holds");
  if (out_chunks_.empty() || out_chunks_.front().data() != chunk.data || chunk.offset != out_bulk_committed_)
    Finding("the executor committed bulk out of order or a chunk it did not acquire");
  out_bulk_acquired_ -= chunk.size - bytes;
  out_bulk_committed_ += bytes;
  out_chunks_.pop_front();
  return Status::Ok();
}

}  // namespace remora::fuzz
