#include "tcp/frame_reader.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "remora/base/util.h"

namespace remora {

Result<size_t> FrameReader::RecvSome() {
  if (begin_ == end_) begin_ = end_ = 0;
  if (end_ == buf_.size()) {
    // Keep the unread bytes and make room behind them (a frame never exceeds the buffer:
    // bodies are bounded, and bulk is read past the buffer).
    std::memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  for (;;) {
    ssize_t r = ::recv(fd_, buf_.data() + end_, buf_.size() - end_, MSG_DONTWAIT);
    if (r > 0) {
      end_ += static_cast<size_t>(r);
      return static_cast<size_t>(r);
    }
    if (r == 0) return Error(Err::kDevicesUnavailable, "peer closed the connection");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return size_t{0};
    return ErrnoStatus(Err::kDevicesUnavailable, "read from peer", errno);
  }
}

Status FrameReader::Fill(size_t n, int timeout_ms, uint64_t deadline_ns) {
  if (n > buf_.size()) buf_.resize(n);
  if (begin_ + n > buf_.size()) {
    std::memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  // Spin first: a reply that comes within microseconds is taken without a wake-up, which
  // costs more than the spin on these machines. Then sleep in poll().
  uint64_t spin_until = timeout_ms == 0 ? 0 : MonotonicNanos() + spin_ns_;
  struct pollfd p = {fd_, POLLIN, 0};
  while (end_ - begin_ < n) {
    ASSIGN_OR_RETURN(size_t got, RecvSome());
    if (got > 0) continue;
    // Spin on poll(), which leaves the socket unlocked for the sender's delivery (a
    // spinning recv() takes the socket lock and measured slower), then read once.
    while (MonotonicNanos() < spin_until && ::poll(&p, 1, 0) == 0) {
    }
    uint64_t now = MonotonicNanos();
    if (now < spin_until) continue;
    int wait_ms = -1;
    if (timeout_ms == 0 || (deadline_ns != 0 && now >= deadline_ns))
      return Error(Err::kTimeout, "timed out after {} ms waiting for the peer", timeout_ms);
    if (deadline_ns != 0) wait_ms = static_cast<int>((deadline_ns - now + 999'999) / 1'000'000);
    int r = ::poll(&p, 1, wait_ms);
    if (r < 0 && errno != EINTR) return ErrnoStatus(Err::kDevicesUnavailable, "poll", errno);
  }
  return Status::Ok();
}

Result<InFrame> FrameReader::Read(int timeout_ms, uint32_t max_body_words, uint32_t* reserved) {
  uint64_t deadline = timeout_ms <= 0 ? 0 : MonotonicNanos() + uint64_t(timeout_ms) * 1'000'000 + 1;
  RETURN_IF_ERROR(Fill(sizeof(FrameHeader), timeout_ms, deadline));
  InFrame f;
  std::memcpy(&f.header, buf_.data() + begin_, sizeof(f.header));
  uint32_t word = f.header.reserved;
  f.header.reserved = 0;
  RETURN_IF_ERROR(ValidateFrameHeader(f.header));
  if (f.header.body_words > max_body_words)
    return Error(Err::kInvalidValue, "frame body of {} words is over the limit of {} here", f.header.body_words, max_body_words);
  size_t body_bytes = size_t{f.header.body_words} * sizeof(uint64_t);
  RETURN_IF_ERROR(Fill(sizeof(FrameHeader) + body_bytes, timeout_ms, deadline));
  body_.resize(f.header.body_words);
  std::memcpy(body_.data(), buf_.data() + begin_ + sizeof(FrameHeader), body_bytes);
  begin_ += sizeof(FrameHeader) + body_bytes;
  f.body = {body_.data(), body_.size()};
  *reserved = word;
  return f;
}

Status FrameReader::ReadBulk(MutableBytes dst) {
  size_t take = std::min(dst.size(), end_ - begin_);
  std::memcpy(dst.data(), buf_.data() + begin_, take);
  begin_ += take;
  size_t off = take;
  while (off < dst.size()) {
    ssize_t r = ::recv(fd_, dst.data() + off, dst.size() - off, MSG_DONTWAIT);
    if (r > 0) {
      off += static_cast<size_t>(r);
      continue;
    }
    if (r == 0) return Error(Err::kDevicesUnavailable, "peer closed the connection");
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return ErrnoStatus(Err::kDevicesUnavailable, "read from peer", errno);
    struct pollfd p = {fd_, POLLIN, 0};
    if (::poll(&p, 1, -1) < 0 && errno != EINTR) return ErrnoStatus(Err::kDevicesUnavailable, "poll", errno);
  }
  return Status::Ok();
}

}  // namespace remora
