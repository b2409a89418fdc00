// Batching of small one-way frames on a stream socket (the TCP requester).
//
// A frame that expects no reply and carries no bulk (an asynchronous launch, memset, event
// record...) is appended to a buffer instead of costing a send() each; on loopback a send
// runs the whole TCP receive path and costs more than the call it carries. The buffer goes
// out with one writev when it reaches kFlushBytes, before any other frame (so order on the
// wire is the order of calls), when the requester is about to wait for the server (Flush),
// and at the latest kFlushDelayUs after its first frame, from a background thread.
//
// Thread-safety: every method may be called from any thread; writes (through the writer
// given at construction, which must outlive the coalescer) are serialised here. The
// background thread starts with the first buffered frame and stops in the destructor.
#pragma once

#include <sys/uio.h>

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "remora/base/bytes.h"
#include "remora/base/status.h"
#include "remora/protocol/frame.h"
#include "remora/protocol/frame_socket.h"

namespace remora {

class FrameCoalescer {
 public:
  static constexpr size_t kFlushBytes = 32 << 10;
  static constexpr int64_t kFlushDelayUs = 20;

  // Writes all of an iovec, blocking (WriteAllV on a socket, or an encrypting writer).
  using Writer = std::function<Status(struct iovec* iov, int iovcnt)>;

  explicit FrameCoalescer(Writer writer) : write_(std::move(writer)) {}
  ~FrameCoalescer();
  FrameCoalescer(const FrameCoalescer&) = delete;
  FrameCoalescer& operator=(const FrameCoalescer&) = delete;

  // Writes `frame` (and `bulk`), or buffers it when it is one-way and small. A write error
  // is returned here or by a later call (the connection is then broken for good).
  Status Write(const OutFrame& frame, ConstBytes bulk);
  // Writes a frame with a header of the caller's (after whatever is buffered), never
  // buffering it: a striped frame, whose bulk travels on the data connections.
  Status WriteHeader(const FrameHeader& h, std::span<const uint64_t> body);
  // Sends whatever is buffered; blocks until it is written.
  Status Flush();

 private:
  Status FlushLocked();
  void Run();

  Writer write_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<uint64_t> buf_;  // whole frames: header words then body words
  uint64_t first_at_ns_ = 0;   // when the oldest buffered frame was added
  Status error_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace remora
