// Reading and writing exactly N bytes of a stream socket, with an optional deadline and an
// optional stop flag: the loop that raw-socket protocols (the supervisors' peer links, the
// emulated NCCL's mesh) would otherwise each write again.
//
// Blocking: both calls block the calling thread until all `n` bytes moved or they give up.
// Without a deadline and a stop flag they sit in recv/send (a shutdown(2) of the socket by
// another thread is then the way to wake them); with either, they poll in slices of at most
// 100 ms, so a stop is seen within about 100 ms and the deadline is kept to about a
// millisecond, whatever the peer does. The socket may be blocking or not.
//
// Thread-safety: the calls share no state; at most one thread may read and one write a given
// socket at a time (two readers would each take part of the other's bytes).
//
// On any result but kDone, part of the bytes may have moved: the stream's position is lost,
// and the caller should close the connection rather than read or write on.
#pragma once

#include <atomic>
#include <cstddef>

namespace remora {

enum class ExactIo {
  kDone,      // all n bytes moved (n == 0 included)
  kClosed,    // read: the peer closed before the n-th byte (orderly EOF, even mid-message)
  kTimedOut,  // the deadline passed first (bytes already there when it passes are still taken)
  kStopped,   // *stop was set (it is looked at before the first byte too)
  kFailed,    // a socket error (errno says which; EPIPE/ECONNRESET for a write to a closed peer)
};

struct ExactIoLimits {
  int timeout_ms = -1;                      // for the whole call (0: only what is there); < 0: none
  const std::atomic<bool>* stop = nullptr;  // not owned; may be null
};

// Reads exactly `n` bytes into `dst`.
ExactIo ReadExact(int fd, void* dst, size_t n, ExactIoLimits limits = {});
// Writes exactly `n` bytes of `src`. Never raises SIGPIPE (MSG_NOSIGNAL).
ExactIo WriteExact(int fd, const void* src, size_t n, ExactIoLimits limits = {});

// A word for logs: "done", "closed by the peer", "timed out", "stopped", "failed".
const char* ExactIoName(ExactIo r);

}  // namespace remora
