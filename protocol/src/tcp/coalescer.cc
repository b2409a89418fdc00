#include "tcp/coalescer.h"

#include <sys/prctl.h>
#include <sys/uio.h>

#include <chrono>
#include <cstring>

#include "remora/base/util.h"

namespace remora {

FrameCoalescer::~FrameCoalescer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    (void)FlushLocked();
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Status FrameCoalescer::Write(const OutFrame& frame, ConstBytes bulk) {
  std::unique_lock<std::mutex> lock(mu_);
  RETURN_IF_ERROR(error_);
  constexpr size_t kHeaderWords = sizeof(FrameHeader) / 8;
  bool one_way = (frame.flags & kFlagExpectsReply) == 0 && bulk.empty();
  FrameHeader h = HeaderOf(frame, bulk.size());
  if (!one_way || (frame.body.size() + kHeaderWords) * 8 > kFlushBytes) {
    // Buffered frames first, then this one, in one writev.
    struct iovec iov[4] = {
        {buf_.data(), buf_.size() * 8},
        {&h, sizeof(h)},
        {const_cast<uint64_t*>(frame.body.data()), frame.body.size_bytes()},
        {const_cast<std::byte*>(bulk.data()), bulk.size()},
    };
    Status st = write_(iov, bulk.empty() ? 3 : 4);
    buf_.clear();
    if (!st.ok()) error_ = st;
    return st;
  }
  size_t at = buf_.size();
  bool was_empty = buf_.empty();
  buf_.resize(at + kHeaderWords + frame.body.size());
  std::memcpy(buf_.data() + at, &h, sizeof(h));
  std::memcpy(buf_.data() + at + kHeaderWords, frame.body.data(), frame.body.size_bytes());
  if (buf_.size() * 8 >= kFlushBytes) return FlushLocked();
  if (was_empty) {
    first_at_ns_ = MonotonicNanos();
    if (!thread_.joinable()) thread_ = std::thread([this] { Run(); });
    lock.unlock();
    cv_.notify_one();
  }
  return Status::Ok();
}

Status FrameCoalescer::WriteHeader(const FrameHeader& h, std::span<const uint64_t> body) {
  std::lock_guard<std::mutex> lock(mu_);
  RETURN_IF_ERROR(error_);
  FrameHeader copy = h;
  struct iovec iov[3] = {
      {buf_.data(), buf_.size() * 8},
      {&copy, sizeof(copy)},
      {const_cast<uint64_t*>(body.data()), body.size_bytes()},
  };
  Status st = write_(iov, 3);
  buf_.clear();
  if (!st.ok()) error_ = st;
  return st;
}

Status FrameCoalescer::Flush() {
  std::lock_guard<std::mutex> lock(mu_);
  return FlushLocked();
}

Status FrameCoalescer::FlushLocked() {
  if (buf_.empty() || !error_.ok()) return error_;
  struct iovec iov = {buf_.data(), buf_.size() * 8};
  Status st = write_(&iov, 1);
  buf_.clear();
  if (!st.ok()) error_ = st;
  return st;
}

void FrameCoalescer::Run() {
  // Wake-ups are due within microseconds: ask the kernel not to defer them by the default
  // 50 us timer slack.
  (void)::prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (buf_.empty()) {
      cv_.wait(lock, [&] { return stop_ || !buf_.empty(); });
      continue;
    }
    uint64_t due = first_at_ns_ + static_cast<uint64_t>(kFlushDelayUs) * 1000;
    uint64_t now = MonotonicNanos();
    if (now < due) {
      cv_.wait_for(lock, std::chrono::nanoseconds(due - now));
      continue;
    }
    (void)FlushLocked();
  }
}

}  // namespace remora
