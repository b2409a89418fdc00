#include "remora/protocol/frame_socket.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "remora/base/util.h"

namespace remora {

Status WaitReadable(int fd, int timeout_ms) {
  struct pollfd p = {fd, POLLIN, 0};
  for (;;) {
    int r = ::poll(&p, 1, timeout_ms);
    if (r > 0) return Status::Ok();
    if (r == 0) return Error(Err::kTimeout, "timed out after {} ms waiting for the peer", timeout_ms);
    if (errno != EINTR) return ErrnoStatus(Err::kDevicesUnavailable, "poll", errno);
  }
}

Status WriteAllV(int fd, struct iovec* iov, int iovcnt) {
  while (iovcnt > 0) {
    struct msghdr msg = {};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(std::min(iovcnt, IOV_MAX));
    ssize_t w = ::sendmsg(fd, &msg, MSG_NOSIGNAL);  // never SIGPIPE the application
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        struct pollfd p = {fd, POLLOUT, 0};
        ::poll(&p, 1, -1);
        continue;
      }
      return ErrnoStatus(Err::kDevicesUnavailable, "write to peer", errno);
    }
    size_t left = static_cast<size_t>(w);
    while (iovcnt > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      iov++;
      iovcnt--;
    }
    if (iovcnt > 0) {
      iov->iov_base = static_cast<char*>(iov->iov_base) + left;
      iov->iov_len -= left;
    }
  }
  return Status::Ok();
}

Status FrameSocket::Write(const OutFrame& frame, ConstBytes bulk, std::span<const int> fds) {
  FrameHeader h = HeaderOf(frame, bulk.size());
  struct iovec iov[3] = {
      {&h, sizeof(h)},
      {const_cast<uint64_t*>(frame.body.data()), frame.body.size() * sizeof(uint64_t)},
      {const_cast<std::byte*>(bulk.data()), bulk.size()},
  };
  int iovcnt = bulk.empty() ? 2 : 3;
  if (fds.empty()) return WriteAllV(fd_, iov, iovcnt);

  // Descriptors travel with the first sendmsg; the rest of the frame follows normally.
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * 8)] = {};
  if (fds.size() > 8) return Error(Err::kInvalidValue, "at most 8 descriptors per frame");
  struct msghdr msg = {};
  msg.msg_iov = iov;
  msg.msg_iovlen = static_cast<size_t>(iovcnt);
  msg.msg_control = control;
  msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
  struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
  std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  ssize_t w;
  do {
    w = ::sendmsg(fd_, &msg, MSG_NOSIGNAL);
  } while (w < 0 && errno == EINTR);
  if (w < 0) return ErrnoStatus(Err::kDevicesUnavailable, "sendmsg to peer", errno);
  size_t left = static_cast<size_t>(w);
  struct iovec* v = iov;
  while (iovcnt > 0 && left >= v->iov_len) {
    left -= v->iov_len;
    v++;
    iovcnt--;
  }
  if (iovcnt == 0) return Status::Ok();
  v->iov_base = static_cast<char*>(v->iov_base) + left;
  v->iov_len -= left;
  return WriteAllV(fd_, v, iovcnt);
}

Status FrameSocket::ReadExact(void* dst, size_t n, uint64_t deadline_ns, std::vector<Fd>* fds) {
  auto* p = static_cast<char*>(dst);
  while (n > 0) {
    if (deadline_ns != 0) {
      uint64_t now = MonotonicNanos();
      int left_ms = now >= deadline_ns ? 0 : static_cast<int>((deadline_ns - now + 999'999) / 1'000'000);
      RETURN_IF_ERROR(WaitReadable(fd_, left_ms));
    }
    struct iovec iov = {p, n};
    alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * 8)];
    struct msghdr msg = {};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    ssize_t r = ::recvmsg(fd_, &msg, MSG_CMSG_CLOEXEC);
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return ErrnoStatus(Err::kDevicesUnavailable, "read from peer", errno);
    }
    for (struct cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; i++) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        if (fds != nullptr) fds->emplace_back(fd);
        else ::close(fd);
      }
    }
    if (r == 0) return Error(Err::kDevicesUnavailable, "peer closed the connection");
    p += r;
    n -= static_cast<size_t>(r);
  }
  return Status::Ok();
}

Result<InFrame> FrameSocket::Read(int timeout_ms, std::vector<Fd>* fds, uint32_t max_body_words, uint32_t* reserved) {
  InFrame f;
  uint64_t deadline = timeout_ms < 0 ? 0 : MonotonicNanos() + uint64_t(timeout_ms) * 1'000'000 + 1;
  RETURN_IF_ERROR(ReadExact(&f.header, sizeof(f.header), deadline, fds));
  if (reserved != nullptr) {
    *reserved = f.header.reserved;
    f.header.reserved = 0;
  }
  RETURN_IF_ERROR(ValidateFrameHeader(f.header));
  if (f.header.body_words > max_body_words)
    return Error(Err::kInvalidValue, "frame body of {} words is over the limit of {} here", f.header.body_words, max_body_words);
  body_.resize(f.header.body_words);
  RETURN_IF_ERROR(ReadExact(body_.data(), body_.size() * sizeof(uint64_t), deadline, nullptr));
  f.body = {body_.data(), body_.size()};
  return f;
}

Status FrameSocket::ReadBulk(MutableBytes dst, int timeout_ms) {
  uint64_t deadline = timeout_ms < 0 ? 0 : MonotonicNanos() + uint64_t(timeout_ms) * 1'000'000 + 1;
  return ReadExact(dst.data(), dst.size(), deadline, nullptr);
}

}  // namespace remora
