// ReplyQueue: the executor's outgoing frames. While a reply's bulk is being produced (a
// device-to-host copy streaming chunk by chunk), later replies and notices wait here and go
// out, in order, when it ends. Executor thread only; borrows the Connection.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "remora/protocol/connection.h"

namespace remora::worker {

class ReplyQueue {
 public:
  explicit ReplyQueue(Connection& conn) : conn_(conn) {}
  // Sends or queues a frame (its body is copied). Bulk is allowed only when nothing waits.
  Status Post(const OutFrame& f, uint64_t bulk_bytes);
  // A reply's bulk is being produced: hold other frames until End.
  void BeginBulk() { bulk_active_ = true; }
  Status EndBulk();

 private:
  struct Queued {
    FrameKind kind;
    uint64_t tag;
    std::vector<uint64_t> body;
  };
  Connection& conn_;
  bool bulk_active_ = false;
  std::deque<Queued> queued_;
};

}  // namespace remora::worker
