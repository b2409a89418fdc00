#include "shm/shm_connection.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>

#include "remora/base/log.h"
#include "remora/base/util.h"
#include "shm/parallel_copy.h"
#include "shm/ring.h"

namespace remora {
namespace {

using shm::Doorbell;
using shm::ParallelCopy;
using shm::Record;

// Spin before sleeping. The requester spins long enough to cover a short GPU call
// (REMORA_SHM_SPIN_US changes it: a latency-sensitive client whose calls wait longer, for a
// turn on a shared GPU say, may spin past the wake-up a sleep costs); the executor covers the
// gap between an application's back-to-back calls.
constexpr int64_t kDefaultRequesterSpinNs = 60'000;
int64_t RequesterSpinNs() {
  static const int64_t ns = [] {
    const char* env = std::getenv("REMORA_SHM_SPIN_US");
    char* end = nullptr;
    unsigned long us = env != nullptr ? std::strtoul(env, &end, 10) : 0;
    if (env == nullptr || end == env || *end != '\0') return kDefaultRequesterSpinNs;
    return static_cast<int64_t>(std::min(us, 1'000'000ul)) * 1000;
  }();
  return ns;
}
constexpr int64_t kExecutorSpinNs = 60'000;
constexpr int64_t kLivenessCheckUs = 50'000;  // sleeping sides look for a dead peer this often

bool PeerGone(int fd) {
  struct pollfd p = {fd, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR)) != 0;
}

class ShmConnection final : public Connection {
 public:
  ShmConnection(Fd sock, shm::Segment seg, std::string peer, bool requester)
      : sock_(std::move(sock)), seg_(std::move(seg)), peer_(std::move(peer)), requester_(requester) {
    const shm::Geometry& g = seg_.geometry();
    shm::Control* c = seg_.control();
    std::byte* b = seg_.base();
    caps_ = {"shm", true, true, false, false, g.inline_bulk};
    if (requester_) {
      out_ring_ = shm::RingProducer(&c->request_ring, b + g.request_ring(), g.ring_bytes);
      in_ring_ = shm::RingConsumer(&c->reply_ring, b + g.reply_ring(), g.ring_bytes, g.inline_bulk);
      out_slots_ = shm::Slots(c->request_slots, b + g.request_slots(), g.slots, g.slot_bytes);
      in_slots_ = shm::Slots(c->reply_slots, b + g.reply_slots(), g.slots, g.slot_bytes);
      my_bell_ = &c->to_requester;
      peer_bell_ = &c->to_executor;
    } else {
      out_ring_ = shm::RingProducer(&c->reply_ring, b + g.reply_ring(), g.ring_bytes);
      in_ring_ = shm::RingConsumer(&c->request_ring, b + g.request_ring(), g.ring_bytes, g.inline_bulk);
      out_slots_ = shm::Slots(c->reply_slots, b + g.reply_slots(), g.slots, g.slot_bytes);
      in_slots_ = shm::Slots(c->request_slots, b + g.request_slots(), g.slots, g.slot_bytes);
      my_bell_ = &c->to_executor;
      peer_bell_ = &c->to_requester;
    }
  }

  const Capabilities& capabilities() const override { return caps_; }
  std::string Describe() const override { return "shm " + peer_; }

  // ---- requester ------------------------------------------------------------------
  Status Send(const OutFrame& frame, ConstBytes bulk, MutableBytes) override {
    FrameHeader h = HeaderOf(frame, bulk.size());
    uint64_t bytes = shm::RecordBytes(h, caps_.inline_bulk_limit);
    if (bytes > seg_.geometry().ring_bytes / 2) return Error(Err::kInvalidValue, "message of {} bytes is too large for the shm ring", bytes);
    std::byte* at = nullptr;
    RETURN_IF_ERROR(WaitUntil([&] { return (at = out_ring_.TryReserve(bytes)) != nullptr; }, "ring space"));
    WriteRecord(at, h, frame.body, bulk.size() <= caps_.inline_bulk_limit ? bulk : ConstBytes{});
    out_ring_.Publish(bytes);
    shm::Ring(peer_bell_);
    if (bulk.size() <= caps_.inline_bulk_limit) return Status::Ok();
    // Staged: fill slots in order as the executor frees them.
    size_t off = 0;
    while (off < bulk.size()) {
      std::byte* slot = nullptr;
      uint32_t index;
      RETURN_IF_ERROR(WaitUntil([&] { return (slot = out_slots_.TryAcquire(&index)) != nullptr; }, "a staging slot"));
      size_t n = std::min<size_t>(bulk.size() - off, out_slots_.slot_bytes());
      ParallelCopy(slot, bulk.data() + off, n);
      out_slots_.Commit(n);
      shm::Ring(peer_bell_);
      off += n;
    }
    return Status::Ok();
  }

  Result<InFrame> Receive(int timeout_ms) override {
    ReleaseCurrent();
    std::optional<Record> rec;
    Status st;
    auto ready = [&] {
      auto r = in_ring_.Peek();
      if (!r.ok()) {
        st = r.status();
        return true;
      }
      rec = *r;
      return rec.has_value();
    };
    if (timeout_ms == 0 && !ready()) {  // a look, no wait (a watchdog's idle poll)
      if (PeerGone(sock_.get())) return Error(Err::kDevicesUnavailable, "the Remora worker closed the session");
      return Error(Err::kTimeout, "no frame from the server yet");
    }
    uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : MonotonicNanos() + uint64_t(timeout_ms) * 1000000;
    bool spun = false;
    while (!shm::WaitOn(my_bell_, spun ? 0 : RequesterSpinNs(), kLivenessCheckUs, ready)) {
      spun = true;
      if (PeerGone(sock_.get())) return Error(Err::kDevicesUnavailable, "the Remora worker closed the session");
      if (MonotonicNanos() >= deadline) return Error(Err::kTimeout, "timed out after {} ms waiting for the server", timeout_ms);
    }
    RETURN_IF_ERROR(st);
    return Hold(*rec);
  }

  Status ReceiveBulk(MutableBytes dst) override {
    if (!current_) return Error(Err::kUnknown, "no frame to take bulk from");
    if (dst.size() != current_->header.bulk_bytes)
      return Error(Err::kInvalidValue, "bulk size mismatch ({} sent, {} expected)", current_->header.bulk_bytes, dst.size());
    if (dst.size() <= caps_.inline_bulk_limit) {
      std::memcpy(dst.data(), InlineBulk(*current_), dst.size());
      return Status::Ok();
    }
    size_t off = 0;
    while (off < dst.size()) {
      std::byte* slot = nullptr;
      uint64_t n = 0;
      uint32_t index;
      Status err;
      RETURN_IF_ERROR(WaitUntil([&] {
        auto r = in_slots_.TryTake(&n, &index);
        if (!r.ok()) { err = r.status(); return true; }
        slot = *r;
        return slot != nullptr;
      }, "bulk data"));
      RETURN_IF_ERROR(err);
      if (n == 0 || n > dst.size() - off) return Error(Err::kInvalidValue, "staging slot of {} bytes does not fit the bulk", n);
      ParallelCopy(dst.data() + off, slot, n);
      in_slots_.Release();
      shm::Ring(peer_bell_);
      off += n;
      progress_.fetch_add(n, std::memory_order_relaxed);
    }
    return Status::Ok();
  }
  // A shut-down socket reads as a gone peer in every wait (PeerGone), and the worker sees EOF.
  void Abort() override { ::shutdown(sock_.get(), SHUT_RDWR); }
  uint64_t ReceiveProgress() const override { return progress_.load(std::memory_order_relaxed); }

  Status PassFd(int fd) override {
    char byte = 'F';
    struct iovec iov = {&byte, 1};
    alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    struct msghdr msg = {};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
    ssize_t w;
    do {
      w = ::sendmsg(sock_.get(), &msg, MSG_NOSIGNAL);
    } while (w < 0 && errno == EINTR);
    if (w != 1) return ErrnoStatus(Err::kDevicesUnavailable, "pass a descriptor to the worker", errno);
    return Status::Ok();
  }

  // ---- executor -------------------------------------------------------------------
  Result<Fd> TakeFd(int timeout_ms) override {
    struct pollfd p = {sock_.get(), POLLIN, 0};
    if (::poll(&p, 1, timeout_ms) <= 0) return Error(Err::kInvalidValue, "the client announced a descriptor but sent none");
    char byte;
    struct iovec iov = {&byte, 1};
    alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)];
    struct msghdr msg = {};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    ssize_t r = ::recvmsg(sock_.get(), &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (r <= 0) return Error(Err::kDevicesUnavailable, "client {} is gone", peer_);
    std::vector<Fd> fds;
    for (struct cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < n; i++) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        fds.emplace_back(fd);
      }
    }
    if (fds.size() != 1) return Error(Err::kInvalidValue, "expected one descriptor from the client, got {}", fds.size());
    return std::move(fds[0]);
  }

  void SetStaging(StagingAllocator* staging) override { staging_ = staging; }
  std::vector<SharedRegion> SharedRegions() const override { return {SharedRegion{seg_.base(), seg_.size()}}; }

  Result<std::optional<InFrame>> Poll() override {
    if (current_ && (bulk_given_ < current_->header.bulk_bytes || chunks_out_ > 0))
      return Error(Err::kUnknown, "executor polled the next frame before consuming this one's bulk");
    ReleaseCurrent();
    ASSIGN_OR_RETURN(std::optional<Record> rec, in_ring_.Peek());
    if (!rec) {
      // Frames the client wrote before it left are delivered first.
      if (peer_gone_) return Error(Err::kDevicesUnavailable, "client {} is gone", peer_);
      return std::optional<InFrame>();
    }
    bulk_given_ = 0;
    return std::optional<InFrame>(Hold(*rec));
  }

  Result<std::optional<BulkChunk>> PollBulkChunk() override {
    if (!current_ || bulk_given_ >= current_->header.bulk_bytes) return std::optional<BulkChunk>();
    uint64_t total = current_->header.bulk_bytes;
    if (total <= caps_.inline_bulk_limit) {
      bulk_given_ = total;
      chunks_out_++;
      return std::optional<BulkChunk>(BulkChunk{const_cast<std::byte*>(InlineBulk(*current_)), total, 0, UINT32_MAX});
    }
    uint64_t n = 0;
    uint32_t index;
    ASSIGN_OR_RETURN(std::byte* slot, in_slots_.TryTake(&n, &index));
    if (slot == nullptr) return std::optional<BulkChunk>();
    if (n == 0 || n > total - bulk_given_) return Error(Err::kInvalidValue, "client staging slot of {} bytes does not fit the bulk", n);
    BulkChunk c{slot, n, bulk_given_, index};
    bulk_given_ += n;
    chunks_out_++;
    return std::optional<BulkChunk>(c);
  }

  void ReleaseBulkChunk(const BulkChunk& chunk) override {
    chunks_out_--;
    if (chunk.id == UINT32_MAX) return;  // inline: freed with its record
    in_slots_.Release();
    shm::Ring(peer_bell_);
  }

  Status Post(const OutFrame& frame, uint64_t bulk_bytes) override {
    if (out_committed_ < out_total_) return Error(Err::kUnknown, "posted a frame before the previous bulk was committed");
    FrameHeader h = HeaderOf(frame, bulk_bytes);
    uint64_t bytes = shm::RecordBytes(h, caps_.inline_bulk_limit);
    if (bytes > seg_.geometry().ring_bytes / 2) return Error(Err::kInvalidValue, "reply of {} bytes is too large for the shm ring", bytes);
    out_total_ = bulk_bytes;
    out_acquired_ = out_committed_ = 0;
    inline_out_ = bulk_bytes > 0 && bulk_bytes <= caps_.inline_bulk_limit;
    if (pending_.empty()) {
      // Fast path: straight into the ring, no copy into a queue. A record with inline bulk
      // stays reserved (unpublished) while its bulk is written in place; no other record can
      // be reserved meanwhile, since the next Post needs this bulk committed.
      if (std::byte* at = out_ring_.TryReserve(bytes)) {
        WriteRecord(at, h, frame.body, {});
        if (inline_out_) {
          inline_ring_at_ = at + sizeof(h) + frame.body.size_bytes();
          inline_ring_bytes_ = bytes;
          return Status::Ok();
        }
        out_ring_.Publish(bytes);
        shm::Ring(peer_bell_);
        return Status::Ok();
      }
    }
    Pending p;
    p.header = h;
    p.record.resize(bytes);
    std::memcpy(p.record.data(), &h, sizeof(h));
    std::memcpy(p.record.data() + sizeof(h), frame.body.data(), frame.body.size_bytes());
    p.complete = !inline_out_;  // inline bulk completes the record when committed
    pending_.push_back(std::move(p));
    FlushPending();
    return Status::Ok();
  }

  Result<std::optional<BulkChunk>> AcquireBulkChunk(size_t max) override {
    if (out_acquired_ >= out_total_) return Error(Err::kUnknown, "no bulk is pending");
    if (inline_out_ && inline_ring_at_ != nullptr) {
      size_t n = std::min<uint64_t>(max, out_total_ - out_acquired_);
      BulkChunk c{inline_ring_at_ + out_acquired_, n, out_acquired_, UINT32_MAX};
      out_acquired_ += n;
      return std::optional<BulkChunk>(c);
    }
    if (inline_out_) {
      if (inline_buf_ == nullptr) {
        if (staging_ == nullptr) return Error(Err::kInitializationError, "transport has no staging allocator");
        ASSIGN_OR_RETURN(inline_buf_, staging_->Allocate(caps_.inline_bulk_limit));
      }
      size_t n = std::min<uint64_t>(max, out_total_ - out_acquired_);
      BulkChunk c{inline_buf_ + out_acquired_, n, out_acquired_, UINT32_MAX};
      out_acquired_ += n;
      return std::optional<BulkChunk>(c);
    }
    uint32_t index;
    std::byte* slot = out_slots_.TryAcquire(&index);
    if (slot == nullptr) return std::optional<BulkChunk>();
    size_t n = std::min<uint64_t>({max, out_slots_.slot_bytes(), out_total_ - out_acquired_});
    BulkChunk c{slot, n, out_acquired_, index};
    out_acquired_ += n;
    return std::optional<BulkChunk>(c);
  }

  Status CommitBulkChunk(const BulkChunk& chunk, size_t bytes) override {
    if (bytes > chunk.size) return Error(Err::kUnknown, "committed more than the chunk holds");
    out_acquired_ -= chunk.size - bytes;
    out_committed_ += bytes;
    if (inline_out_ && inline_ring_at_ != nullptr) {
      if (out_committed_ == out_total_) {
        out_ring_.Publish(inline_ring_bytes_);
        inline_ring_at_ = nullptr;
        shm::Ring(peer_bell_);
      }
      return Status::Ok();
    }
    if (inline_out_) {
      if (out_committed_ == out_total_) {
        Pending& p = pending_.back();
        std::memcpy(p.record.data() + sizeof(FrameHeader) + p.header.body_words * 8ull, inline_buf_, out_total_);
        p.complete = true;
        FlushPending();
      }
      return Status::Ok();
    }
    out_slots_.Commit(bytes);
    shm::Ring(peer_bell_);
    return Status::Ok();
  }

  Result<bool> Progress() override {
    PayRing();
    if (peer_gone_ && !in_ring_.HasDataBeyond(current_ ? current_->bytes : 0))
      return Error(Err::kDevicesUnavailable, "client {} is gone", peer_);
    size_t before = pending_.size();
    FlushPending();
    return pending_.size() != before;
  }

  void WaitForActivity(int64_t timeout_us) override {
    PayRing();
    auto ready = [&] {
      if (in_ring_.HasDataBeyond(current_ ? current_->bytes : 0)) return true;
      if (current_ && bulk_given_ < current_->header.bulk_bytes && in_slots_.NextFull()) return true;
      if (out_acquired_ < out_total_ && !inline_out_ && out_slots_.NextFree()) return true;
      if (!pending_.empty() && pending_.front().complete) return true;  // ring space may have freed
      return false;
    };
    int64_t slice = std::min<int64_t>(timeout_us, kLivenessCheckUs);
    bool woke = shm::WaitOn(my_bell_, std::min<int64_t>(kExecutorSpinNs, timeout_us * 1000), slice, ready);
    // Look for a dead client when the wait timed out, and at least every check period even
    // while busy.
    uint64_t now = MonotonicNanos();
    if (!woke || now - last_liveness_ns_ > uint64_t(kLivenessCheckUs) * 1000) {
      last_liveness_ns_ = now;
      if (PeerGone(sock_.get())) peer_gone_ = true;
    }
  }

 private:
  struct Pending {
    FrameHeader header;
    std::vector<std::byte> record;
    bool complete = false;
  };

  static void WriteRecord(std::byte* at, const FrameHeader& h, std::span<const uint64_t> body, ConstBytes bulk) {
    std::memcpy(at, &h, sizeof(h));
    std::memcpy(at + sizeof(h), body.data(), body.size_bytes());
    if (!bulk.empty()) std::memcpy(at + sizeof(h) + body.size_bytes(), bulk.data(), bulk.size());
  }

  const std::byte* InlineBulk(const Record& r) const { return r.at + sizeof(FrameHeader) + r.header.body_words * 8ull; }

  InFrame Hold(const Record& r) {
    current_ = r;
    InFrame f;
    f.header = r.header;
    f.body = {reinterpret_cast<const uint64_t*>(r.at + sizeof(FrameHeader)), r.header.body_words};
    if (!requester_) {
      // The ring is memory the client can still write: the worker decodes a private copy,
      // so a value it checked is the value it uses (no double fetch).
      body_copy_.assign(f.body.begin(), f.body.end());
      f.body = {body_copy_.data(), body_copy_.size()};
    }
    return f;
  }

  // Frees the record last handed out. The requester rings the worker at once; the executor
  // owes the client a ring (it may wait for room) and pays it once per loop pass, in Progress
  // or before sleeping, not once per request.
  void ReleaseCurrent() {
    if (!current_) return;
    in_ring_.Release(current_->bytes);
    current_.reset();
    if (requester_) shm::Ring(peer_bell_);
    else ring_owed_ = true;
  }
  void PayRing() {
    if (!ring_owed_) return;
    ring_owed_ = false;
    shm::Ring(peer_bell_);
  }

  // Requester-side blocking wait with liveness checks.
  template <typename Pred>
  Status WaitUntil(Pred ready, const char* what) {
    bool spun = false;
    while (!shm::WaitOn(my_bell_, spun ? 0 : RequesterSpinNs(), kLivenessCheckUs, ready)) {
      spun = true;
      if (PeerGone(sock_.get()))
        return Error(Err::kDevicesUnavailable, "the Remora worker closed the session while waiting for {}", what);
    }
    return Status::Ok();
  }

  void FlushPending() {
    bool wrote = false;
    while (!pending_.empty() && pending_.front().complete) {
      Pending& p = pending_.front();
      std::byte* at = out_ring_.TryReserve(p.record.size());
      if (at == nullptr) break;
      std::memcpy(at, p.record.data(), p.record.size());
      out_ring_.Publish(p.record.size());
      pending_.pop_front();
      wrote = true;
    }
    if (wrote) shm::Ring(peer_bell_);
  }

  Fd sock_;
  shm::Segment seg_;
  std::string peer_;
  bool requester_;
  Capabilities caps_;
  shm::RingProducer out_ring_;
  shm::RingConsumer in_ring_;
  shm::Slots out_slots_, in_slots_;
  Doorbell* my_bell_ = nullptr;
  Doorbell* peer_bell_ = nullptr;

  // The ring record of a reply with inline bulk, reserved by Post's fast path until its bulk
  // is committed (nullptr otherwise): the bulk area inside it, and the record's size.
  std::byte* inline_ring_at_ = nullptr;
  uint64_t inline_ring_bytes_ = 0;
  std::optional<Record> current_;
  std::vector<uint64_t> body_copy_;  // executor: the private copy of current_'s body
  uint64_t bulk_given_ = 0;
  int chunks_out_ = 0;
  bool peer_gone_ = false;
  std::atomic<uint64_t> progress_{0};  // requester: bulk bytes received through the slots
  bool ring_owed_ = false;  // executor: records were released since the client was last rung
  uint64_t last_liveness_ns_ = 0;

  StagingAllocator* staging_ = nullptr;
  std::deque<Pending> pending_;
  uint64_t out_total_ = 0, out_acquired_ = 0, out_committed_ = 0;
  bool inline_out_ = false;
  std::byte* inline_buf_ = nullptr;

 public:
  ~ShmConnection() override {
    if (inline_buf_ != nullptr && staging_ != nullptr) staging_->Free(inline_buf_, caps_.inline_bulk_limit);
  }
};

}  // namespace

std::unique_ptr<Connection> MakeShmRequester(Fd sock, shm::Segment segment, std::string peer) {
  return std::make_unique<ShmConnection>(std::move(sock), std::move(segment), std::move(peer), true);
}

std::unique_ptr<Connection> MakeShmExecutor(Fd sock, shm::Segment segment, std::string peer) {
  return std::make_unique<ShmConnection>(std::move(sock), std::move(segment), std::move(peer), false);
}

}  // namespace remora
