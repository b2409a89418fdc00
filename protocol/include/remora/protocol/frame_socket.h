// Blocking frame I/O on a connected stream socket (TCP or unix). Used for every handshake
// and by the TCP transport's requester side. File descriptors can ride along with a frame
// on unix sockets (SCM_RIGHTS). Not thread-safe; does not own the fd.
#pragma once

#include <sys/uio.h>

#include <span>
#include <vector>

#include "remora/base/bytes.h"
#include "remora/base/fd.h"
#include "remora/base/status.h"
#include "remora/protocol/frame.h"

namespace remora {

class FrameSocket {
 public:
  explicit FrameSocket(int fd) : fd_(fd) {}

  int fd() const { return fd_; }

  // Writes header, body and `bulk` with as few syscalls as possible (writev). `fds` are
  // attached to the first byte (unix sockets only).
  Status Write(const OutFrame& frame, ConstBytes bulk = {}, std::span<const int> fds = {});
  // Reads one frame within timeout_ms (for the whole frame; < 0 waits forever). The body is
  // valid until the next Read. Received descriptors (at most 8) are appended to `fds` if
  // given, closed otherwise. A body over max_body_words is refused before it is read. With
  // `reserved`, the header's reserved word is stored there (and zeroed) instead of refused
  // (the tcp transport's stripe word).
  Result<InFrame> Read(int timeout_ms, std::vector<Fd>* fds = nullptr, uint32_t max_body_words = kMaxBodyWords,
                       uint32_t* reserved = nullptr);
  // Reads exactly dst.size() bytes of bulk that follow the last frame.
  Status ReadBulk(MutableBytes dst, int timeout_ms);

 private:
  // deadline_ns 0: no deadline.
  Status ReadExact(void* dst, size_t n, uint64_t deadline_ns, std::vector<Fd>* fds);

  int fd_;
  std::vector<uint64_t> body_;
};

// Low-level helpers shared by transports.
// Writes all of iov (handles short writes and EINTR); blocks.
Status WriteAllV(int fd, struct iovec* iov, int iovcnt);
// Waits until fd is readable (or hung up); kTimeout after timeout_ms (<0: forever).
Status WaitReadable(int fd, int timeout_ms);

}  // namespace remora
