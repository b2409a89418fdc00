// The TCP transport with every byte sealed in records (secure/aead.h): the same frames and
// bulk trailers as tcp_connection.cc, inside an encrypted, authenticated stream.
//
// Reading: ciphertext is received into `in_` (bounded: a few records); records are opened
// into `plain_` only as far as the next frame needs, or straight into the destination of
// bulk data (a client's buffer, a staging chunk) when a whole record fits there. Writing:
// the requester seals into a buffer and writes it out blocking (small one-way frames are
// coalesced first, as on plain TCP); the executor seals into a bounded queue sent without
// blocking, and reads no further request while its replies pile up.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <mutex>

#include "chunk_pool.h"
#include "remora/base/util.h"
#include "remora/protocol/frame_socket.h"
#include "secure/aead.h"
#include "tcp/coalescer.h"
#include "tcp/tcp_connection.h"

namespace remora {
namespace {

using secure::kMaxRecord;
using secure::kRecordHeader;
using secure::kRecordOverhead;
using secure::RecordCipher;

constexpr size_t kChunkBytes = 4 << 20;
constexpr size_t kChunkCount = 6;
constexpr size_t kInBytes = 2 * (kMaxRecord + kRecordOverhead);
constexpr size_t kSealBatch = 1 << 20;            // requester: bytes sealed per write
constexpr size_t kMaxQueuedBytes = 16 << 20;      // executor: sealed bytes not yet sent
constexpr uint64_t kRequesterSpinNs = 50'000;
constexpr int64_t kSpinNanos = 30'000;

class SecureTcpConnection final : public Connection {
 public:
  SecureTcpConnection(Fd sock, std::string peer, const SessionKeys& keys, bool requester)
      : sock_(std::move(sock)), peer_(std::move(peer)),
        send_(keys.cipher, requester ? keys.client_to_server : keys.server_to_client),
        recv_(keys.cipher, requester ? keys.server_to_client : keys.client_to_server),
        in_(kInBytes), plain_(kMaxRecord * 2), in_pool_(kChunkCount, kChunkBytes), out_pool_(kChunkCount, kChunkBytes),
        cipher_name_(CipherName(keys.cipher)) {}
  ~SecureTcpConnection() override {
    in_pool_.FreeAll();
    out_pool_.FreeAll();
  }

  const Capabilities& capabilities() const override {
    static const Capabilities caps = {"tcp", false, false, false, false, 0};
    return caps;
  }
  std::string Describe() const override { return "tcp " + peer_ + " (encrypted, " + cipher_name_ + ")"; }

  // ---- requester ----
  Status Send(const OutFrame& frame, ConstBytes bulk, MutableBytes) override { return out_.Write(frame, bulk); }
  Status Flush() override { return out_.Flush(); }

  Result<InFrame> Receive(int timeout_ms) override {
    RETURN_IF_ERROR(out_.Flush());
    uint64_t deadline = timeout_ms < 0 ? 0 : MonotonicNanos() + uint64_t(timeout_ms) * 1'000'000 + 1;
    FrameHeader h;
    RETURN_IF_ERROR(NeedPlain(sizeof(h), deadline));
    std::memcpy(&h, plain_.data() + plain_begin_, sizeof(h));
    RETURN_IF_ERROR(ValidateFrameHeader(h));
    size_t body = size_t{h.body_words} * 8;
    RETURN_IF_ERROR(NeedPlain(sizeof(h) + body, deadline));
    frame_body_.assign(h.body_words, 0);
    std::memcpy(frame_body_.data(), plain_.data() + plain_begin_ + sizeof(h), body);
    plain_begin_ += sizeof(h) + body;
    InFrame f;
    f.header = h;
    f.body = {frame_body_.data(), frame_body_.size()};
    return f;
  }

  Status ReceiveBulk(MutableBytes dst) override {
    auto* p = reinterpret_cast<uint8_t*>(dst.data());
    size_t left = dst.size();
    size_t take = std::min(left, PlainAvail());
    std::memcpy(p, plain_.data() + plain_begin_, take);
    plain_begin_ += take;
    p += take;
    left -= take;
    while (left > 0) {
      ASSIGN_OR_RETURN(size_t n, NextRecord(0));
      progress_.fetch_add(n, std::memory_order_relaxed);
      if (n <= left) {
        RETURN_IF_ERROR(OpenInto(p));  // a whole record lands in place
        p += n;
        left -= n;
      } else {
        RETURN_IF_ERROR(OpenToPlain());
        std::memcpy(p, plain_.data() + plain_begin_, left);
        plain_begin_ += left;
        left = 0;
      }
    }
    return Status::Ok();
  }

  void Abort() override { ::shutdown(sock_.get(), SHUT_RDWR); }
  uint64_t ReceiveProgress() const override { return progress_.load(std::memory_order_relaxed); }

  // ---- executor ----
  void SetStaging(StagingAllocator* staging) override {
    in_pool_.SetAllocator(staging);
    out_pool_.SetAllocator(staging);
  }
  std::vector<SharedRegion> SharedRegions() const override { return {}; }

  Result<std::optional<InFrame>> Poll() override {
    if (frame_ready_) {
      if (bulk_given_ < cur_.bulk_bytes || chunks_out_ > 0)
        return Error(Err::kUnknown, "executor polled the next frame before consuming this one's bulk");
      frame_ready_ = false;
    }
    if (queued_ > kMaxQueuedBytes) {
      RETURN_IF_ERROR(FlushOut());
      if (queued_ > kMaxQueuedBytes) return std::optional<InFrame>();  // back-pressure
    }
    FrameHeader h;
    ASSIGN_OR_RETURN(bool have, TryPlain(sizeof(h)));
    if (!have) return std::optional<InFrame>();
    std::memcpy(&h, plain_.data() + plain_begin_, sizeof(h));
    RETURN_IF_ERROR(ValidateFrameHeader(h));
    size_t body = size_t{h.body_words} * 8;
    ASSIGN_OR_RETURN(have, TryPlain(sizeof(h) + body));
    if (!have) return std::optional<InFrame>();
    frame_body_.assign(h.body_words, 0);
    std::memcpy(frame_body_.data(), plain_.data() + plain_begin_ + sizeof(h), body);
    plain_begin_ += sizeof(h) + body;
    cur_ = h;
    frame_ready_ = true;
    bulk_given_ = 0;
    InFrame f;
    f.header = h;
    f.body = {frame_body_.data(), frame_body_.size()};
    return std::optional<InFrame>(f);
  }

  Result<std::optional<BulkChunk>> PollBulkChunk() override {
    if (!frame_ready_ || bulk_given_ >= cur_.bulk_bytes) return std::optional<BulkChunk>();
    if (filling_ < 0) {
      ASSIGN_OR_RETURN(filling_, in_pool_.Acquire());
      if (filling_ < 0) return std::optional<BulkChunk>();
      filling_size_ = std::min<uint64_t>(kChunkBytes, cur_.bulk_bytes - bulk_given_);
      filled_ = 0;
    }
    auto* dst = reinterpret_cast<uint8_t*>(in_pool_.data(filling_));
    while (filled_ < filling_size_) {
      size_t take = std::min(filling_size_ - filled_, PlainAvail());
      if (take > 0) {
        std::memcpy(dst + filled_, plain_.data() + plain_begin_, take);
        plain_begin_ += take;
        filled_ += take;
        continue;
      }
      ASSIGN_OR_RETURN(size_t n, PeekRecord());
      if (n == 0) {
        ASSIGN_OR_RETURN(bool got, FillIn(false));
        if (!got) return std::optional<BulkChunk>();
        continue;
      }
      if (n <= filling_size_ - filled_) {
        RETURN_IF_ERROR(OpenInto(dst + filled_));
        filled_ += n;
      } else {
        RETURN_IF_ERROR(OpenToPlain());
      }
    }
    BulkChunk c{reinterpret_cast<std::byte*>(dst), filling_size_, bulk_given_, static_cast<uint32_t>(filling_)};
    bulk_given_ += filling_size_;
    filling_ = -1;
    chunks_out_++;
    return std::optional<BulkChunk>(c);
  }

  void ReleaseBulkChunk(const BulkChunk& chunk) override {
    in_pool_.Release(static_cast<int>(chunk.id));
    chunks_out_--;
  }

  Status Post(const OutFrame& frame, uint64_t bulk_bytes) override {
    if (out_committed_ < out_total_) return Error(Err::kUnknown, "posted a frame before the previous bulk was committed");
    FrameHeader h = HeaderOf(frame, bulk_bytes);
    std::vector<uint8_t> plain(sizeof(h) + frame.body.size_bytes());
    std::memcpy(plain.data(), &h, sizeof(h));
    std::memcpy(plain.data() + sizeof(h), frame.body.data(), frame.body.size_bytes());
    Queue(plain.data(), plain.size());
    out_total_ = bulk_bytes;
    out_acquired_ = out_committed_ = 0;
    return bulk_bytes > 0 ? Status::Ok() : FlushOut();
  }

  Result<std::optional<BulkChunk>> AcquireBulkChunk(size_t max) override {
    if (out_acquired_ >= out_total_) return Error(Err::kUnknown, "no bulk is pending");
    if (queued_ > kMaxQueuedBytes) {
      RETURN_IF_ERROR(FlushOut());
      if (queued_ > kMaxQueuedBytes) return std::optional<BulkChunk>();
    }
    ASSIGN_OR_RETURN(int idx, out_pool_.Acquire());
    if (idx < 0) return std::optional<BulkChunk>();
    size_t n = std::min<uint64_t>({max, kChunkBytes, out_total_ - out_acquired_});
    BulkChunk c{out_pool_.data(idx), n, out_acquired_, static_cast<uint32_t>(idx)};
    out_acquired_ += n;
    return std::optional<BulkChunk>(c);
  }

  Status CommitBulkChunk(const BulkChunk& chunk, size_t bytes) override {
    if (bytes > chunk.size) return Error(Err::kUnknown, "committed more than the chunk holds");
    out_acquired_ -= chunk.size - bytes;
    Queue(chunk.data, bytes);  // sealed copies: the chunk is free again at once
    out_pool_.Release(static_cast<int>(chunk.id));
    out_committed_ += bytes;
    return FlushOut();
  }

  Result<bool> Progress() override {
    size_t before = queued_;
    RETURN_IF_ERROR(FlushOut());
    return queued_ != before;
  }

  void WaitForActivity(int64_t timeout_us) override {
    if (PlainAvail() > 0 || PeekLength() != 0) return;
    struct pollfd p = {sock_.get(), static_cast<short>(POLLIN | (outq_.empty() ? 0 : POLLOUT)), 0};
    uint64_t deadline = MonotonicNanos() + static_cast<uint64_t>(std::min<int64_t>(timeout_us * 1000, kSpinNanos));
    do {
      if (::poll(&p, 1, 0) > 0) return;
    } while (MonotonicNanos() < deadline);
    if (timeout_us * 1000 > kSpinNanos) ::poll(&p, 1, static_cast<int>((timeout_us + 999) / 1000));
  }

  // Encrypting writer of the requester (under the coalescer's lock).
  Status SealAndWrite(struct iovec* iov, int iovcnt) {
    seal_buf_.resize(kSealBatch + kRecordOverhead);
    size_t used = 0;
    for (int i = 0; i < iovcnt; i++) {
      auto* p = static_cast<const uint8_t*>(iov[i].iov_base);
      size_t n = iov[i].iov_len;
      while (n > 0) {
        if (used + kRecordOverhead + 1 > seal_buf_.size()) {
          RETURN_IF_ERROR(WriteSealed(used));
          used = 0;
        }
        size_t take = std::min({n, kMaxRecord, seal_buf_.size() - used - kRecordOverhead});
        send_.Seal(p, take, seal_buf_.data() + used);
        used += take + kRecordOverhead;
        p += take;
        n -= take;
      }
    }
    return used > 0 ? WriteSealed(used) : Status::Ok();
  }

 private:
  Status WriteSealed(size_t n) {
    struct iovec v = {seal_buf_.data(), n};
    return WriteAllV(sock_.get(), &v, 1);
  }

  size_t PlainAvail() const { return plain_end_ - plain_begin_; }

  // Plaintext length of the complete record at the head of in_, 0 if none is complete yet.
  size_t PeekLength() const {
    if (in_end_ - in_begin_ < kRecordHeader) return 0;
    size_t n = RecordCipher::RecordLength(in_.data() + in_begin_);
    if (n == 0) return SIZE_MAX;  // broken stream: reported by PeekRecord
    return in_end_ - in_begin_ >= n + kRecordOverhead ? n : 0;
  }
  Result<size_t> PeekRecord() const {
    size_t n = PeekLength();
    if (n == SIZE_MAX) return Error(Err::kDevicesUnavailable, "encrypted stream from {} is corrupt (bad record length)", peer_);
    return n;
  }

  // Receives what is available (blocking: waits until something arrives or the deadline,
  // 0 = none). True if bytes arrived.
  Result<bool> FillIn(bool block, uint64_t deadline = 0) {
    if (in_begin_ > 0 && (in_begin_ == in_end_ || in_.size() - in_end_ < kMaxRecord + kRecordOverhead)) {
      std::memmove(in_.data(), in_.data() + in_begin_, in_end_ - in_begin_);
      in_end_ -= in_begin_;
      in_begin_ = 0;
    }
    for (;;) {
      if (in_end_ == in_.size()) return Error(Err::kDevicesUnavailable, "encrypted stream from {} is corrupt", peer_);
      ssize_t r = ::recv(sock_.get(), in_.data() + in_end_, in_.size() - in_end_, MSG_DONTWAIT);
      if (r > 0) {
        in_end_ += static_cast<size_t>(r);
        return true;
      }
      if (r == 0) return Error(Err::kDevicesUnavailable, "{} closed the connection", peer_);
      if (errno == EINTR) continue;
      if (errno != EAGAIN) return ErrnoStatus(Err::kDevicesUnavailable, "recv", errno);
      if (!block) return false;
      int wait_ms = -1;
      if (deadline != 0) {
        uint64_t now = MonotonicNanos();
        if (now >= deadline) return Error(Err::kTimeout, "timed out waiting for {}", peer_);
        wait_ms = static_cast<int>((deadline - now + 999'999) / 1'000'000);
      }
      RETURN_IF_ERROR(WaitReadable(sock_.get(), wait_ms));
    }
  }

  // Blocks until a complete record is in in_; returns its plaintext length.
  Result<size_t> NextRecord(uint64_t deadline) {
    for (;;) {
      ASSIGN_OR_RETURN(size_t n, PeekRecord());
      if (n != 0) return n;
      ASSIGN_OR_RETURN(bool got, FillIn(true, deadline));
      (void)got;
    }
  }

  Status OpenInto(uint8_t* dst) {
    const uint8_t* rec = in_.data() + in_begin_;
    size_t n = RecordCipher::RecordLength(rec);
    if (!recv_.Open(rec, rec + kRecordHeader, dst))
      return Error(Err::kDevicesUnavailable, "a record from {} failed authentication: the connection was tampered with",
                   peer_);
    in_begin_ += n + kRecordOverhead;
    return Status::Ok();
  }

  Status OpenToPlain() {
    size_t n = RecordCipher::RecordLength(in_.data() + in_begin_);
    if (plain_begin_ > 0) {
      std::memmove(plain_.data(), plain_.data() + plain_begin_, PlainAvail());
      plain_end_ -= plain_begin_;
      plain_begin_ = 0;
    }
    if (plain_.size() - plain_end_ < n) plain_.resize(plain_end_ + n);
    RETURN_IF_ERROR(OpenInto(plain_.data() + plain_end_));
    plain_end_ += n;
    return Status::Ok();
  }

  // Requester: blocks until `n` plaintext bytes are buffered.
  Status NeedPlain(size_t n, uint64_t deadline) {
    bool spun = false;
    while (PlainAvail() < n) {
      ASSIGN_OR_RETURN(size_t len, PeekRecord());
      if (len != 0) {
        RETURN_IF_ERROR(OpenToPlain());
        continue;
      }
      if (!spun) {
        // A reply that comes within microseconds is picked up without a wake-up.
        spun = true;
        struct pollfd p = {sock_.get(), POLLIN, 0};
        uint64_t until = MonotonicNanos() + kRequesterSpinNs;
        while (::poll(&p, 1, 0) == 0 && MonotonicNanos() < until) {
        }
      }
      ASSIGN_OR_RETURN(bool got, FillIn(true, deadline));
      (void)got;
    }
    return Status::Ok();
  }

  // Executor: true once `n` plaintext bytes are buffered; reads only what is there.
  Result<bool> TryPlain(size_t n) {
    while (PlainAvail() < n) {
      ASSIGN_OR_RETURN(size_t len, PeekRecord());
      if (len != 0) {
        RETURN_IF_ERROR(OpenToPlain());
        continue;
      }
      ASSIGN_OR_RETURN(bool got, FillIn(false));
      if (!got) return false;
    }
    return true;
  }

  // Executor: seals `n` bytes into the send queue.
  void Queue(const void* data, size_t n) {
    auto* p = static_cast<const uint8_t*>(data);
    while (n > 0) {
      size_t batch = std::min(n, kSealBatch);
      size_t records = (batch + kMaxRecord - 1) / kMaxRecord;
      std::vector<uint8_t> sealed(batch + records * kRecordOverhead);
      size_t at = 0;
      for (size_t done = 0; done < batch;) {
        size_t take = std::min(kMaxRecord, batch - done);
        send_.Seal(p + done, take, sealed.data() + at);
        at += take + kRecordOverhead;
        done += take;
      }
      queued_ += sealed.size();
      outq_.push_back(std::move(sealed));
      p += batch;
      n -= batch;
    }
  }

  Status FlushOut() {
    while (!outq_.empty()) {
      struct iovec iov[64];
      int n = 0;
      size_t first_sent = out_sent_;
      for (auto it = outq_.begin(); it != outq_.end() && n < 64; ++it, ++n) {
        size_t off = n == 0 ? first_sent : 0;
        iov[n] = {it->data() + off, it->size() - off};
      }
      struct msghdr msg = {};
      msg.msg_iov = iov;
      msg.msg_iovlen = static_cast<size_t>(n);
      ssize_t w = ::sendmsg(sock_.get(), &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (w < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN) return Status::Ok();
        return ErrnoStatus(Err::kDevicesUnavailable, "send to client", errno);
      }
      size_t left = static_cast<size_t>(w);
      while (!outq_.empty() && left > 0) {
        size_t rest = outq_.front().size() - out_sent_;
        if (left < rest) {
          out_sent_ += left;
          left = 0;
          break;
        }
        left -= rest;
        queued_ -= outq_.front().size();
        outq_.pop_front();
        out_sent_ = 0;
      }
    }
    return Status::Ok();
  }

  Fd sock_;
  std::atomic<uint64_t> progress_{0};  // requester: bulk bytes received
  std::string peer_;
  RecordCipher send_, recv_;
  std::vector<uint8_t> seal_buf_;
  // After what SealAndWrite uses: its thread's last flush runs in its destructor, which must
  // come first (found by TSan: the seal buffer was freed under that flush).
  FrameCoalescer out_{[this](struct iovec* iov, int n) { return SealAndWrite(iov, n); }};

  // Receiving (both roles).
  std::vector<uint8_t> in_;  // ciphertext
  size_t in_begin_ = 0, in_end_ = 0;
  std::vector<uint8_t> plain_;  // opened, not yet consumed
  size_t plain_begin_ = 0, plain_end_ = 0;
  std::vector<uint64_t> frame_body_;

  // Executor input.
  FrameHeader cur_{};
  bool frame_ready_ = false;
  uint64_t bulk_given_ = 0;
  int filling_ = -1;
  size_t filling_size_ = 0, filled_ = 0;
  int chunks_out_ = 0;
  ChunkPool in_pool_;

  // Executor output.
  std::deque<std::vector<uint8_t>> outq_;
  size_t out_sent_ = 0;  // of outq_.front()
  size_t queued_ = 0;    // bytes in outq_
  uint64_t out_total_ = 0, out_acquired_ = 0, out_committed_ = 0;
  ChunkPool out_pool_;
  std::string cipher_name_;
};

}  // namespace

std::unique_ptr<Connection> MakeSecureTcpRequester(Fd sock, std::string peer, const SessionKeys& keys) {
  return std::make_unique<SecureTcpConnection>(std::move(sock), std::move(peer), keys, true);
}

Result<std::unique_ptr<Connection>> MakeSecureTcpExecutor(Fd sock, const SessionKeys& keys) {
  int flags = fcntl(sock.get(), F_GETFL);
  if (flags < 0 || fcntl(sock.get(), F_SETFL, flags | O_NONBLOCK) < 0)
    return ErrnoStatus(Err::kUnknown, "fcntl(O_NONBLOCK)", errno);
  std::string peer = SocketPeerName(sock.get());
  return std::unique_ptr<Connection>(std::make_unique<SecureTcpConnection>(std::move(sock), std::move(peer), keys, false));
}

}  // namespace remora
