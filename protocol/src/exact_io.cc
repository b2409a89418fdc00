// Exact-length socket I/O with a deadline and a stop flag (exact_io.h).
#include "remora/protocol/exact_io.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>

#include "remora/base/util.h"

namespace remora {
namespace {

constexpr int kSliceMs = 100;  // how long a limited call sleeps before it looks at `stop` again

// Moves `n` bytes with `io(offset, flags)` (recv or send from `offset` on). Limited calls wait in
// poll(2) for `events` and then move without blocking; unlimited ones block in the call itself.
template <typename Io>
ExactIo Exact(int fd, short events, size_t n, ExactIoLimits limits, Io io) {
  const bool limited = limits.timeout_ms >= 0 || limits.stop != nullptr;
  const uint64_t deadline = limits.timeout_ms >= 0 ? MonotonicNanos() + uint64_t(limits.timeout_ms) * 1'000'000 : 0;
  size_t done = 0;
  while (done < n) {
    if (limits.stop != nullptr && limits.stop->load()) return ExactIo::kStopped;
    if (limited) {
      int slice = kSliceMs;
      if (limits.timeout_ms >= 0) {
        uint64_t now = MonotonicNanos();
        slice = now >= deadline ? 0 : static_cast<int>(std::min<uint64_t>(kSliceMs, (deadline - now + 999'999) / 1'000'000));
      }
      struct pollfd p = {fd, events, 0};
      int r = ::poll(&p, 1, slice);
      if (r < 0 && errno != EINTR) return ExactIo::kFailed;
      if (r <= 0) {
        // Bytes that are there are still taken once the deadline passed; a wait is not.
        if (limits.timeout_ms >= 0 && MonotonicNanos() >= deadline) return ExactIo::kTimedOut;
        continue;
      }
      // Ready, hung up or in error: the call below says which.
    }
    ssize_t r = io(done, limited ? MSG_DONTWAIT : 0);
    if (r == 0) {
      if (events == POLLIN) return ExactIo::kClosed;
      continue;  // a send that moved nothing: try again
    }
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return ExactIo::kFailed;
      if (!limited) {  // a non-blocking socket: wait here rather than spin
        struct pollfd p = {fd, events, 0};
        (void)::poll(&p, 1, -1);
      }
      continue;
    }
    done += static_cast<size_t>(r);
  }
  return ExactIo::kDone;
}

}  // namespace

ExactIo ReadExact(int fd, void* dst, size_t n, ExactIoLimits limits) {
  auto* p = static_cast<char*>(dst);
  return Exact(fd, POLLIN, n, limits, [&](size_t at, int flags) { return ::recv(fd, p + at, n - at, flags); });
}

ExactIo WriteExact(int fd, const void* src, size_t n, ExactIoLimits limits) {
  const auto* p = static_cast<const char*>(src);
  return Exact(fd, POLLOUT, n, limits,
               [&](size_t at, int flags) { return ::send(fd, p + at, n - at, flags | MSG_NOSIGNAL); });
}

const char* ExactIoName(ExactIo r) {
  switch (r) {
    case ExactIo::kDone: return "done";
    case ExactIo::kClosed: return "closed by the peer";
    case ExactIo::kTimedOut: return "timed out";
    case ExactIo::kStopped: return "stopped";
    case ExactIo::kFailed: return "failed";
  }
  return "?";
}

}  // namespace remora
