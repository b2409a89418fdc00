// FrameReader: the requester's side of a TCP control connection, read with as few syscalls
// as possible. A reply and its small bulk usually arrive in one segment; reading header, body
// and bulk separately cost three recvmsg calls (and a poll that saw the data) on every
// synchronous call. Here one recv into a buffer serves all of them, and the wait for a reply
// spins on that same recv before it sleeps. Private to protocol/.
//
// Thread-safety: one reader at a time (the shim's Client guarantees it: `receiving_`).
// The socket may be blocking or not: every recv here is MSG_DONTWAIT, waits are poll().
#pragma once

#include <cstdint>
#include <vector>

#include "remora/base/bytes.h"
#include "remora/base/status.h"
#include "remora/protocol/frame.h"

namespace remora {

class FrameReader {
 public:
  // `spin_ns`: how long a wait polls the socket before it sleeps in poll().
  FrameReader(int fd, uint64_t spin_ns) : fd_(fd), spin_ns_(spin_ns) {}

  // Reads one frame. timeout_ms < 0 waits forever; 0 takes only what has arrived; a timeout
  // (kTimeout) keeps what was read, so the stream stays in step. The header's reserved word
  // is stored in *reserved and zeroed. The body is valid until the next Read. Bodies over
  // max_body_words are refused before they are read.
  Result<InFrame> Read(int timeout_ms, uint32_t max_body_words, uint32_t* reserved);
  // Reads exactly dst.size() bytes of bulk that follow the last frame (blocks): buffered
  // bytes first, the rest straight into dst.
  Status ReadBulk(MutableBytes dst);

 private:
  // Until `n` bytes are buffered or the deadline (0: none) passes.
  Status Fill(size_t n, int timeout_ms, uint64_t deadline_ns);
  // One recv into the buffer's free space: bytes read, 0 if none were ready.
  Result<size_t> RecvSome();

  int fd_;
  uint64_t spin_ns_;
  std::vector<std::byte> buf_ = std::vector<std::byte>(64 << 10);
  size_t begin_ = 0, end_ = 0;
  std::vector<uint64_t> body_;
};

}  // namespace remora
