#include "tcp/stripes.h"

#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

#include "remora/base/log.h"
#include "remora/base/util.h"
#include "remora/protocol/frame_socket.h"

namespace remora {

StripeLayout PlanStripes(uint64_t total, uint32_t available) {
  StripeLayout l;
  l.total = total;
  if (available == 0 || total < kStripeThreshold) return l;
  l.streams = static_cast<uint32_t>(std::min<uint64_t>(available, l.chunks()));
  return l;
}

Result<StripeLayout> DecodeStripes(uint32_t word, uint64_t total, uint32_t available) {
  StripeLayout l;
  l.total = total;
  l.streams = word & 0xff;
  l.shift = (word >> 8) & 0xff;
  if ((word >> 16) != 0 || l.streams == 0 || l.streams > available || l.shift < 12 || l.shift > 30 || total == 0 ||
      l.chunks() < l.streams)
    return Error(Err::kDevicesUnavailable, "the peer announced bulk striped over {} of this session's {} data connections "
                                           "(chunks of 2^{} bytes, {} bytes): not a layout this session can carry",
                 l.streams, available, l.shift, total);
  return l;
}

Status ReadAllV(int fd, struct iovec* iov, int iovcnt) {
  while (iovcnt > 0) {
    struct msghdr msg = {};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(std::min(iovcnt, IOV_MAX));
    ssize_t r = ::recvmsg(fd, &msg, MSG_WAITALL);
    if (r < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(Err::kDevicesUnavailable, "read from a data connection", errno);
    }
    if (r == 0) return Error(Err::kDevicesUnavailable, "a data connection of the session was closed");
    size_t left = static_cast<size_t>(r);
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

namespace {

// The iovecs of stream `s`'s chunks of `l` within `base`, after `header`.
std::vector<struct iovec> StreamIov(const StripeLayout& l, uint32_t s, std::byte* base, StripeHeader* header) {
  std::vector<struct iovec> iov;
  iov.push_back({header, sizeof(*header)});
  for (uint64_t k = s; k < l.chunks(); k += l.streams) iov.push_back({base + l.offset(k), l.size(k)});
  return iov;
}

StripeHeader HeaderFor(const StripeLayout& l, uint32_t s, uint64_t tag) {
  StripeHeader h;
  h.index = static_cast<uint16_t>(s);
  h.streams = static_cast<uint8_t>(l.streams);
  h.shift = static_cast<uint8_t>(l.shift);
  h.tag = tag;
  h.total = l.total;
  return h;
}

Status CheckHeader(const StripeHeader& got, const StripeHeader& want) {
  if (std::memcmp(&got, &want, sizeof(got)) != 0)
    return Error(Err::kDevicesUnavailable,
                 "data connection {} is out of step (stripe of frame {} with {} bytes over {} streams, expected frame {} "
                 "with {} over {})",
                 want.index, got.tag, got.total, got.streams, want.tag, want.total, want.streams);
  return Status::Ok();
}

}  // namespace

// ---- StreamThread ---------------------------------------------------------------------

StreamThread::StreamThread() : thread_([this] { Run(); }) {}

StreamThread::~StreamThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void StreamThread::Start(std::function<Status()> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = std::move(job);
    has_job_ = true;
    done_ = false;
  }
  cv_.notify_all();
}

Status StreamThread::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_; });
  return result_;
}

void StreamThread::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || has_job_; });
    if (stop_) return;
    has_job_ = false;
    auto job = std::move(job_);
    lock.unlock();
    Status st = job();
    lock.lock();
    result_ = st;
    done_ = true;
    cv_.notify_all();
  }
}

// ---- requester --------------------------------------------------------------------------

RequesterStripes::RequesterStripes(std::vector<Fd> socks) : socks_(std::move(socks)) {
  for (size_t i = 0; i < socks_.size(); i++) {
    senders_.push_back(std::make_unique<StreamThread>());
    receivers_.push_back(std::make_unique<StreamThread>());
  }
}

void RequesterStripes::Abort() {
  for (Fd& s : socks_) ::shutdown(s.get(), SHUT_RDWR);
}

RequesterStripes::~RequesterStripes() {
  for (Fd& s : socks_) ::shutdown(s.get(), SHUT_RDWR);  // unblocks a transfer in progress
  senders_.clear();
  receivers_.clear();
}

Status RequesterStripes::Send(uint64_t tag, const StripeLayout& l, ConstBytes bulk) {
  RETURN_IF_ERROR(broken_send_);
  std::vector<StripeHeader> headers(l.streams);
  for (uint32_t s = 0; s < l.streams; s++) {
    headers[s] = HeaderFor(l, s, tag);
    senders_[s]->Start([&, s] {
      auto iov = StreamIov(l, s, const_cast<std::byte*>(bulk.data()), &headers[s]);
      return WriteAllV(socks_[s].get(), iov.data(), static_cast<int>(iov.size()));
    });
  }
  Status first;
  for (uint32_t s = 0; s < l.streams; s++) {
    Status st = senders_[s]->Wait();
    if (!st.ok() && first.ok()) first = Status(Err::kDevicesUnavailable, "data connection " + std::to_string(s) + ": " + st.message());
  }
  if (!first.ok()) {
    broken_send_ = first;
    for (Fd& s : socks_) ::shutdown(s.get(), SHUT_RDWR);
  }
  return first;
}

Status RequesterStripes::Receive(uint64_t tag, const StripeLayout& l, MutableBytes dst) {
  RETURN_IF_ERROR(broken_recv_);
  if (dst.size() != l.total) return Error(Err::kUnknown, "striped bulk of {} bytes for a buffer of {}", l.total, dst.size());
  std::vector<StripeHeader> got(l.streams);
  for (uint32_t s = 0; s < l.streams; s++) {
    receivers_[s]->Start([&, s] {
      auto iov = StreamIov(l, s, dst.data(), &got[s]);
      // The header first, checked before any byte lands in the caller's buffer.
      RETURN_IF_ERROR(ReadAllV(socks_[s].get(), iov.data(), 1));
      RETURN_IF_ERROR(CheckHeader(got[s], HeaderFor(l, s, tag)));
      return ReadAllV(socks_[s].get(), iov.data() + 1, static_cast<int>(iov.size() - 1));
    });
  }
  Status first;
  for (uint32_t s = 0; s < l.streams; s++) {
    Status st = receivers_[s]->Wait();
    if (!st.ok() && first.ok()) first = Status(Err::kDevicesUnavailable, "data connection " + std::to_string(s) + ": " + st.message());
  }
  if (!first.ok()) {
    broken_recv_ = first;
    for (Fd& s : socks_) ::shutdown(s.get(), SHUT_RDWR);
  }
  return first;
}

// ---- executor ---------------------------------------------------------------------------

ExecutorStripes::ExecutorStripes(std::vector<Fd> socks, std::string peer)
    : peer_(std::move(peer)), wake_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  for (Fd& s : socks) {
    auto st = std::make_unique<Stream>();
    st->sock = std::move(s);
    streams_.push_back(std::move(st));
  }
  for (uint32_t i = 0; i < streams_.size(); i++) {
    streams_[i]->reader = std::thread([this, i] { ReaderLoop(i); });
    streams_[i]->writer = std::thread([this, i] { WriterLoop(i); });
  }
}

ExecutorStripes::~ExecutorStripes() {
  stop_ = true;
  for (auto& s : streams_) {
    ::shutdown(s->sock.get(), SHUT_RDWR);
    for (Ring* r : {&s->in, &s->out}) {
      std::lock_guard<std::mutex> lock(r->mu);
      r->cv.notify_all();
    }
  }
  for (auto& s : streams_) {
    s->reader.join();
    s->writer.join();
    FreeRing(s->in);
    FreeRing(s->out);
  }
}

void ExecutorStripes::Wake() {
  uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof(one));
  woken_.store(true, std::memory_order_release);  // after the write: DrainWake reads only then
}

void ExecutorStripes::DrainWake() {
  // The executor calls this on every pass of its loop: no syscall unless a thread woke it.
  if (!woken_.exchange(false, std::memory_order_acquire)) return;
  uint64_t v;
  (void)!::read(wake_.get(), &v, sizeof(v));
}

void ExecutorStripes::Fail(const Status& st) {
  if (stop_) return;
  {
    std::lock_guard<std::mutex> lock(err_mu_);
    if (!error_.ok()) return;
    error_ = Status(Err::kDevicesUnavailable, st.message());
  }
  failed_ = true;
  // The executor ends the session with this error and logs it then (a client that ends its
  // session may close a data connection before its control connection).
  LOG_DEBUG("tcp session with {}: {}", peer_, st.message());
  Wake();
}

Status ExecutorStripes::error() const {
  if (!failed_) return Status::Ok();
  std::lock_guard<std::mutex> lock(err_mu_);
  return error_;
}

Status ExecutorStripes::AllocateRing(Ring& r) {
  if (staging_ == nullptr) return Error(Err::kInitializationError, "transport has no staging allocator");
  std::byte* got[kRing] = {};
  for (uint32_t i = 0; i < kRing; i++) {
    auto p = staging_->Allocate(size_t{1} << kStripeShift);
    if (!p.ok()) {
      for (uint32_t j = 0; j < i; j++) staging_->Free(got[j], size_t{1} << kStripeShift);
      return p.status();
    }
    got[i] = *p;
  }
  std::lock_guard<std::mutex> lock(r.mu);
  for (uint32_t i = 0; i < kRing; i++) r.slots[i].data = got[i];
  r.cv.notify_all();
  return Status::Ok();
}

void ExecutorStripes::FreeRing(Ring& r) {
  for (Slot& s : r.slots)
    if (s.data != nullptr && staging_ != nullptr) staging_->Free(s.data, size_t{1} << kStripeShift);
}

void ExecutorStripes::ReaderLoop(uint32_t index) {
  (void)::prctl(PR_SET_NAME, "remora-stripe-in");
  Stream& st = *streams_[index];
  Ring& r = st.in;
  while (!stop_) {
    StripeHeader h;
    struct iovec hv = {&h, sizeof(h)};
    Status s = ReadAllV(st.sock.get(), &hv, 1);
    if (!s.ok()) return Fail(Error(Err::kDevicesUnavailable, "data connection {}: {}", index, s.message()));
    auto l = DecodeStripes(uint32_t{h.streams} | (uint32_t{h.shift} << 8), h.total, count());
    if (!l.ok() || h.magic != StripeHeader{}.magic || h.index != index || index >= l->streams)
      return Fail(Error(Err::kDevicesUnavailable, "data connection {} is out of step (a malformed stripe header)", index));
    for (uint64_t k = index; k < l->chunks(); k += l->streams) {
      std::unique_lock<std::mutex> lock(r.mu);
      r.cv.wait(lock, [&] { return stop_ || (r.slots[0].data != nullptr && r.produced - r.freed < kRing); });
      if (stop_) return;
      Slot& slot = r.slots[r.produced % kRing];
      lock.unlock();
      slot.tag = h.tag;
      slot.offset = l->offset(k);
      slot.size = l->size(k);
      struct iovec v = {slot.data, slot.size};
      s = ReadAllV(st.sock.get(), &v, 1);
      if (!s.ok()) return Fail(Error(Err::kDevicesUnavailable, "data connection {}: {}", index, s.message()));
      lock.lock();
      r.produced++;
      lock.unlock();
      Wake();
    }
  }
}

void ExecutorStripes::WriterLoop(uint32_t index) {
  (void)::prctl(PR_SET_NAME, "remora-stripe-out");
  Stream& st = *streams_[index];
  Ring& r = st.out;
  for (;;) {
    std::unique_lock<std::mutex> lock(r.mu);
    r.cv.wait(lock, [&] { return stop_ || r.produced > r.consumed; });
    if (stop_) return;
    Slot& slot = r.slots[r.consumed % kRing];
    lock.unlock();
    struct iovec v[2] = {{&slot.header, sizeof(slot.header)}, {slot.data, slot.size}};
    Status s = slot.first ? WriteAllV(st.sock.get(), v, 2) : WriteAllV(st.sock.get(), v + 1, 1);
    if (!s.ok()) return Fail(Error(Err::kDevicesUnavailable, "data connection {}: {}", index, s.message()));
    lock.lock();
    r.consumed++;
    lock.unlock();
    Wake();
  }
}

Status ExecutorStripes::BeginInbound(uint64_t tag, const StripeLayout& l) {
  RETURN_IF_ERROR(error());
  if (!in_allocated_) {
    for (auto& s : streams_) RETURN_IF_ERROR(AllocateRing(s->in));
    in_allocated_ = true;
  }
  in_layout_ = l;
  in_tag_ = tag;
  in_next_ = 0;
  return Status::Ok();
}

Result<std::optional<BulkChunk>> ExecutorStripes::PollChunk() {
  RETURN_IF_ERROR(error());
  if (in_next_ >= in_layout_.chunks()) return std::optional<BulkChunk>();
  uint32_t s = in_layout_.stream(in_next_);
  Ring& r = streams_[s]->in;
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.consumed == r.produced) return std::optional<BulkChunk>();
  Slot& slot = r.slots[r.consumed % kRing];
  if (slot.tag != in_tag_ || slot.offset != in_layout_.offset(in_next_) || slot.size != in_layout_.size(in_next_)) {
    Status bad = Error(Err::kDevicesUnavailable, "data connection {} is out of step (a stripe of frame {} where frame {} "
                                                 "was announced)", s, slot.tag, in_tag_);
    Fail(bad);
    return bad;
  }
  r.consumed++;
  BulkChunk c{slot.data, slot.size, slot.offset, s};
  in_next_++;
  return std::optional<BulkChunk>(c);
}

void ExecutorStripes::ReleaseChunk(const BulkChunk& c) {
  Ring& r = streams_[c.id]->in;
  std::lock_guard<std::mutex> lock(r.mu);
  r.freed++;
  r.cv.notify_all();
}

Status ExecutorStripes::BeginOutbound(uint64_t tag, const StripeLayout& l) {
  RETURN_IF_ERROR(error());
  if (!out_allocated_) {
    for (auto& s : streams_) RETURN_IF_ERROR(AllocateRing(s->out));
    out_allocated_ = true;
  }
  out_layout_ = l;
  out_tag_ = tag;
  out_next_ = 0;
  return Status::Ok();
}

Result<std::optional<BulkChunk>> ExecutorStripes::AcquireChunk() {
  RETURN_IF_ERROR(error());
  if (out_next_ >= out_layout_.chunks()) return Error(Err::kUnknown, "no bulk is pending");
  uint32_t s = out_layout_.stream(out_next_);
  Ring& r = streams_[s]->out;
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.freed - r.consumed >= kRing) return std::optional<BulkChunk>();  // all being sent
  Slot& slot = r.slots[r.freed % kRing];
  slot.tag = out_tag_;
  slot.offset = out_layout_.offset(out_next_);
  slot.size = out_layout_.size(out_next_);
  slot.first = out_next_ < out_layout_.streams;
  slot.header = HeaderFor(out_layout_, s, out_tag_);
  r.freed++;
  BulkChunk c{slot.data, slot.size, slot.offset, s};
  out_next_++;
  return std::optional<BulkChunk>(c);
}

Status ExecutorStripes::CommitChunk(const BulkChunk& c, size_t bytes) {
  RETURN_IF_ERROR(error());
  if (bytes != c.size) return Error(Err::kUnknown, "a striped chunk committed short ({} of {} bytes)", bytes, c.size);
  Ring& r = streams_[c.id]->out;
  std::lock_guard<std::mutex> lock(r.mu);
  r.produced++;
  r.cv.notify_all();
  return Status::Ok();
}

}  // namespace remora
