#include "worker/session/reply_queue.h"

namespace remora::worker {

Status ReplyQueue::Post(const OutFrame& f, uint64_t bulk_bytes) {
  if (bulk_active_ || !queued_.empty()) {
    if (bulk_bytes > 0) return Error(Err::kUnknown, "two bulk replies at once");
    queued_.push_back(Queued{f.kind, f.tag, std::vector<uint64_t>(f.body.begin(), f.body.end())});
    return Status::Ok();
  }
  return conn_.Post(f, bulk_bytes);
}

Status ReplyQueue::EndBulk() {
  bulk_active_ = false;
  while (!queued_.empty()) {
    Queued& q = queued_.front();
    OutFrame f;
    f.kind = q.kind;
    f.tag = q.tag;
    f.body = {q.body.data(), q.body.size()};
    RETURN_IF_ERROR(conn_.Post(f, 0));
    queued_.pop_front();
  }
  return Status::Ok();
}

}  // namespace remora::worker
