#include "tcp/tcp_connection.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>

#include "chunk_pool.h"
#include "tcp/coalescer.h"
#include "tcp/frame_reader.h"
#include "tcp/stripes.h"
#include "remora/base/util.h"
#include "remora/protocol/frame_socket.h"

namespace remora {
namespace {

constexpr size_t kChunkBytes = 4 << 20;  // bulk pipelining unit on the executor side
constexpr size_t kChunkCount = 6;
constexpr int64_t kSpinNanos = 30'000;
constexpr uint64_t kRequesterSpinNs = 50'000;
// Replies queued for a client that does not read them: past this, the executor reads no
// further request until the client has caught up (back-pressure, never unbounded memory).
constexpr size_t kMaxQueuedReplyBytes = 8 << 20;

class TcpConnection final : public Connection {
 public:
  // `data`: the session's data connections (docs/PROTOCOL.md), striped over by the
  // requester (`requester`) or the executor.
  TcpConnection(Fd sock, std::string peer, std::vector<Fd> data, bool requester)
      : sock_(std::move(sock)), peer_(std::move(peer)),
        in_pool_(kChunkCount, kChunkBytes), out_pool_(kChunkCount, kChunkBytes) {
    data_streams_ = static_cast<uint32_t>(data.size());
    if (data.empty()) return;
    if (requester) req_stripes_ = std::make_unique<RequesterStripes>(std::move(data));
    else ex_stripes_ = std::make_unique<ExecutorStripes>(std::move(data), peer_);
  }
  ~TcpConnection() override {
    in_pool_.FreeAll();
    out_pool_.FreeAll();
  }

  const Capabilities& capabilities() const override {
    static const Capabilities caps = {"tcp", false, false, false, false, 0};
    return caps;
  }
  std::string Describe() const override {
    return data_streams_ == 0 ? "tcp " + peer_ : fmt::format("tcp {} ({} data streams)", peer_, data_streams_);
  }

  // ---- requester ----
  Status Send(const OutFrame& frame, ConstBytes bulk, MutableBytes) override {
    StripeLayout l = PlanStripes(bulk.size(), data_streams_);
    if (l.streams == 0 || !req_stripes_) return out_.Write(frame, bulk);
    FrameHeader h = HeaderOf(frame, bulk.size());
    h.reserved = l.Encode();
    RETURN_IF_ERROR(out_.WriteHeader(h, frame.body));
    return req_stripes_->Send(frame.tag, l, bulk);
  }
  Status Flush() override { return out_.Flush(); }
  Result<InFrame> Receive(int timeout_ms) override {
    RETURN_IF_ERROR(out_.Flush());  // the server may need what is buffered to answer
    // A striped frame's header word is read here, before the rest of the header is validated.
    ASSIGN_OR_RETURN(InFrame f, reader_.Read(timeout_ms, kMaxBodyWords, &recv_stripe_word_));
    recv_layout_ = StripeLayout{};
    if (recv_stripe_word_ != 0) {
      ASSIGN_OR_RETURN(recv_layout_, DecodeStripes(recv_stripe_word_, f.header.bulk_bytes, data_streams_));
      recv_tag_ = f.header.tag;
    }
    return f;
  }
  Status ReceiveBulk(MutableBytes dst) override {
    if (recv_layout_.streams != 0) {
      StripeLayout l = recv_layout_;
      recv_layout_ = StripeLayout{};
      RETURN_IF_ERROR(req_stripes_->Receive(recv_tag_, l, dst));
      progress_.fetch_add(dst.size(), std::memory_order_relaxed);
      return Status::Ok();
    }
    // In pieces, so a watchdog sees a long reply progressing (ReceiveProgress).
    for (size_t off = 0; off < dst.size();) {
      size_t n = std::min<size_t>(dst.size() - off, kChunkBytes);
      RETURN_IF_ERROR(reader_.ReadBulk(dst.subspan(off, n)));
      off += n;
      progress_.fetch_add(n, std::memory_order_relaxed);
    }
    return Status::Ok();
  }
  void Abort() override {
    ::shutdown(sock_.get(), SHUT_RDWR);
    if (req_stripes_) req_stripes_->Abort();
  }
  uint64_t ReceiveProgress() const override { return progress_.load(std::memory_order_relaxed); }

  // ---- executor ----
  void SetStaging(StagingAllocator* staging) override {
    in_pool_.SetAllocator(staging);
    out_pool_.SetAllocator(staging);
    if (ex_stripes_) ex_stripes_->SetStaging(staging);
  }
  std::vector<SharedRegion> SharedRegions() const override { return {}; }

  Result<std::optional<InFrame>> Poll() override {
    if (frame_ready_) {
      if (bulk_given_ < cur_.bulk_bytes || chunks_out_ > 0)
        return Error(Err::kUnknown, "executor polled the next frame before consuming this one's bulk");
      in_begin_ = bulk_pos_;
      frame_ready_ = false;
    }
    if (queued_bytes_ > kMaxQueuedReplyBytes) {
      RETURN_IF_ERROR(FlushOut());
      if (queued_bytes_ > kMaxQueuedReplyBytes) return std::optional<InFrame>();
    }
    // Keep the next header 8-byte aligned and make room at the tail.
    if (in_begin_ > 0 && (in_begin_ % 8 != 0 || in_begin_ == in_end_ || in_.size() * 8 - in_end_ < 4096)) {
      std::memmove(bytes(), bytes() + in_begin_, in_end_ - in_begin_);
      in_end_ -= in_begin_;
      in_begin_ = 0;
    }
    size_t need = sizeof(FrameHeader);
    if (in_end_ - in_begin_ >= sizeof(FrameHeader)) {
      RETURN_IF_ERROR(ParseHeader());
      need = sizeof(FrameHeader) + cur_.body_words * 8ull;
    }
    if (in_end_ - in_begin_ < need) {
      EnsureCapacity(in_begin_ + need + 64 * 1024);
      RETURN_IF_ERROR(Fill());
      if (in_end_ - in_begin_ < sizeof(FrameHeader)) return std::optional<InFrame>();
      RETURN_IF_ERROR(ParseHeader());
      need = sizeof(FrameHeader) + cur_.body_words * 8ull;
      if (in_end_ - in_begin_ < need) {
        EnsureCapacity(in_begin_ + need);
        return std::optional<InFrame>();
      }
    }
    frame_ready_ = true;
    bulk_pos_ = in_begin_ + need;
    bulk_given_ = 0;
    if (in_layout_.streams != 0) RETURN_IF_ERROR(ex_stripes_->BeginInbound(cur_.tag, in_layout_));
    InFrame f;
    f.header = cur_;
    f.body = {reinterpret_cast<const uint64_t*>(bytes() + in_begin_ + sizeof(FrameHeader)), cur_.body_words};
    return std::optional<InFrame>(f);
  }

  Result<std::optional<BulkChunk>> PollBulkChunk() override {
    if (!frame_ready_ || bulk_given_ >= cur_.bulk_bytes) return std::optional<BulkChunk>();
    if (in_layout_.streams != 0) {
      ASSIGN_OR_RETURN(std::optional<BulkChunk> c, ex_stripes_->PollChunk());
      if (!c) return c;
      c->id |= kStripedChunk;
      bulk_given_ += c->size;
      chunks_out_++;
      return c;
    }
    if (filling_ < 0) {
      ASSIGN_OR_RETURN(filling_, in_pool_.Acquire());
      if (filling_ < 0) return std::optional<BulkChunk>();
      filling_size_ = std::min<uint64_t>(kChunkBytes, cur_.bulk_bytes - bulk_given_);
      filled_ = 0;
    }
    std::byte* dst = in_pool_.data(filling_);
    // Bytes already buffered behind the body come first.
    size_t buffered = std::min<size_t>(in_end_ - bulk_pos_, filling_size_ - filled_);
    if (buffered > 0) {
      std::memcpy(dst + filled_, bytes() + bulk_pos_, buffered);
      bulk_pos_ += buffered;
      filled_ += buffered;
    }
    while (filled_ < filling_size_) {
      ssize_t r = ::recv(sock_.get(), dst + filled_, filling_size_ - filled_, MSG_DONTWAIT);
      if (r > 0) {
        filled_ += static_cast<size_t>(r);
        continue;
      }
      if (r == 0) return Error(Err::kDevicesUnavailable, "client {} closed the connection", peer_);
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return std::optional<BulkChunk>();
      return ErrnoStatus(Err::kDevicesUnavailable, "recv", errno);
    }
    BulkChunk c{dst, filling_size_, bulk_given_, static_cast<uint32_t>(filling_)};
    bulk_given_ += filling_size_;
    filling_ = -1;
    chunks_out_++;
    return std::optional<BulkChunk>(c);
  }

  void ReleaseBulkChunk(const BulkChunk& chunk) override {
    if (chunk.id & kStripedChunk) {
      BulkChunk c = chunk;
      c.id &= ~kStripedChunk;
      ex_stripes_->ReleaseChunk(c);
    } else {
      in_pool_.Release(static_cast<int>(chunk.id));
    }
    chunks_out_--;
  }

  Status Post(const OutFrame& frame, uint64_t bulk_bytes) override {
    if (out_committed_ < out_total_) return Error(Err::kUnknown, "posted a frame before the previous bulk was committed");
    FrameHeader h;
    h.kind = static_cast<uint16_t>(frame.kind);
    h.flags = frame.flags;
    h.tag = frame.tag;
    h.body_words = static_cast<uint32_t>(frame.body.size());
    h.bulk_bytes = bulk_bytes;
    out_layout_ = ex_stripes_ ? PlanStripes(bulk_bytes, data_streams_) : StripeLayout{};
    h.reserved = out_layout_.Encode();
    if (out_layout_.streams != 0) RETURN_IF_ERROR(ex_stripes_->BeginOutbound(frame.tag, out_layout_));
    OutItem item;
    item.owned.resize(sizeof(h) + frame.body.size_bytes());
    std::memcpy(item.owned.data(), &h, sizeof(h));
    std::memcpy(item.owned.data() + sizeof(h), frame.body.data(), frame.body.size_bytes());
    item.data = item.owned.data();
    item.len = item.owned.size();
    queued_bytes_ += item.len;
    outq_.push_back(std::move(item));
    out_total_ = bulk_bytes;
    out_acquired_ = out_committed_ = 0;
    // A frame with bulk goes out together with its first data (one send, one segment),
    // unless its bulk travels on the data connections.
    return bulk_bytes > 0 && out_layout_.streams == 0 ? Status::Ok() : FlushOut();
  }

  Result<std::optional<BulkChunk>> AcquireBulkChunk(size_t max) override {
    if (out_acquired_ >= out_total_) return Error(Err::kUnknown, "no bulk is pending");
    if (out_layout_.streams != 0) {
      ASSIGN_OR_RETURN(std::optional<BulkChunk> c, ex_stripes_->AcquireChunk());
      if (!c) return c;
      if (c->size > max) return Error(Err::kUnknown, "a striped reply's chunk asked for {} bytes of {}", max, c->size);
      out_acquired_ += c->size;
      c->id |= kStripedChunk;
      return c;
    }
    ASSIGN_OR_RETURN(int idx, out_pool_.Acquire());
    if (idx < 0) {
      RETURN_IF_ERROR(FlushOut());
      return std::optional<BulkChunk>();
    }
    size_t n = std::min<uint64_t>({max, kChunkBytes, out_total_ - out_acquired_});
    BulkChunk c{out_pool_.data(idx), n, out_acquired_, static_cast<uint32_t>(idx)};
    out_acquired_ += n;
    return std::optional<BulkChunk>(c);
  }

  Status CommitBulkChunk(const BulkChunk& chunk, size_t bytes) override {
    if (bytes > chunk.size) return Error(Err::kUnknown, "committed more than the chunk holds");
    if (chunk.id & kStripedChunk) {
      BulkChunk c = chunk;
      c.id &= ~kStripedChunk;
      RETURN_IF_ERROR(ex_stripes_->CommitChunk(c, bytes));
      out_committed_ += bytes;
      return FlushOut();
    }
    out_acquired_ -= chunk.size - bytes;  // a short chunk gives its tail back
    OutItem item;
    item.data = chunk.data;
    item.len = bytes;
    item.pool_index = static_cast<int>(chunk.id);
    outq_.push_back(std::move(item));
    out_committed_ += bytes;
    return FlushOut();
  }

  Result<bool> Progress() override {
    if (ex_stripes_) {
      ex_stripes_->DrainWake();
      RETURN_IF_ERROR(ex_stripes_->error());
    }
    size_t before = outq_.size();
    RETURN_IF_ERROR(FlushOut());
    return outq_.size() != before;
  }

  void WaitForActivity(int64_t timeout_us) override {
    // The stripes' threads signal filled and freed chunks (and failures) on their eventfd.
    struct pollfd p[2] = {{sock_.get(), static_cast<short>(POLLIN | (outq_.empty() ? 0 : POLLOUT)), 0},
                          {ex_stripes_ ? ex_stripes_->wake_fd() : -1, POLLIN, 0}};
    nfds_t n = ex_stripes_ ? 2 : 1;
    uint64_t deadline = MonotonicNanos() + static_cast<uint64_t>(std::min<int64_t>(timeout_us * 1000, kSpinNanos));
    do {
      if (::poll(p, n, 0) > 0) return;
    } while (MonotonicNanos() < deadline);
    if (timeout_us * 1000 > kSpinNanos) ::poll(p, n, static_cast<int>((timeout_us + 999) / 1000));
  }

 private:
  static constexpr uint32_t kStripedChunk = 1u << 31;  // BulkChunk::id of a chunk from the stripes

  // The frame header at in_begin_ into cur_, its stripe word taken out of `reserved`.
  Status ParseHeader() {
    std::memcpy(&cur_, bytes() + in_begin_, sizeof(cur_));
    uint32_t word = cur_.reserved;
    cur_.reserved = 0;
    RETURN_IF_ERROR(ValidateFrameHeader(cur_));
    in_layout_ = StripeLayout{};
    if (word == 0) return Status::Ok();
    ASSIGN_OR_RETURN(in_layout_, DecodeStripes(word, cur_.bulk_bytes, data_streams_));
    return Status::Ok();
  }

  struct OutItem {
    std::vector<std::byte> owned;
    std::byte* data = nullptr;
    size_t len = 0;
    size_t sent = 0;
    int pool_index = -1;
  };

  std::byte* bytes() { return reinterpret_cast<std::byte*>(in_.data()); }
  void EnsureCapacity(size_t n) {
    if (in_.size() * 8 < n) in_.resize((n + 7) / 8);
  }

  Status Fill() {
    for (;;) {
      size_t room = in_.size() * 8 - in_end_;
      if (room == 0) return Status::Ok();
      ssize_t r = ::recv(sock_.get(), bytes() + in_end_, room, MSG_DONTWAIT);
      if (r > 0) {
        in_end_ += static_cast<size_t>(r);
        if (static_cast<size_t>(r) < room) return Status::Ok();
        continue;
      }
      if (r == 0) return Error(Err::kDevicesUnavailable, "client {} closed the connection", peer_);
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return Status::Ok();
      return ErrnoStatus(Err::kDevicesUnavailable, "recv", errno);
    }
  }

  Status FlushOut() {
    while (!outq_.empty()) {
      struct iovec iov[64];
      int n = 0;
      for (auto it = outq_.begin(); it != outq_.end() && n < 64; ++it, ++n)
        iov[n] = {it->data + it->sent, it->len - it->sent};
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
        OutItem& it = outq_.front();
        size_t take = std::min(left, it.len - it.sent);
        it.sent += take;
        left -= take;
        if (it.sent == it.len) {
          if (it.pool_index >= 0) out_pool_.Release(it.pool_index);
          else queued_bytes_ -= it.len;
          outq_.pop_front();
        }
      }
    }
    return Status::Ok();
  }

  Fd sock_;
  std::string peer_;
  FrameReader reader_{sock_.get(), kRequesterSpinNs};  // requester reads
  std::atomic<uint64_t> progress_{0};  // requester: bulk bytes received
  FrameCoalescer out_{[this](struct iovec* iov, int n) { return WriteAllV(sock_.get(), iov, n); }};  // requester writes

  // executor input
  std::vector<uint64_t> in_ = std::vector<uint64_t>(64 * 1024 / 8);
  size_t in_begin_ = 0, in_end_ = 0;  // bytes
  FrameHeader cur_{};
  bool frame_ready_ = false;
  size_t bulk_pos_ = 0;       // next bulk byte in in_ (while buffered bytes remain)
  uint64_t bulk_given_ = 0;   // bulk bytes handed out as chunks
  int filling_ = -1;
  size_t filling_size_ = 0, filled_ = 0;
  int chunks_out_ = 0;
  ChunkPool in_pool_;

  // executor output
  std::deque<OutItem> outq_;
  size_t queued_bytes_ = 0;  // of frames in outq_ (bulk chunks are bounded by out_pool_)
  uint64_t out_total_ = 0, out_acquired_ = 0, out_committed_ = 0;
  ChunkPool out_pool_;

  // data connections
  uint32_t data_streams_ = 0;
  std::unique_ptr<RequesterStripes> req_stripes_;
  std::unique_ptr<ExecutorStripes> ex_stripes_;
  uint32_t recv_stripe_word_ = 0;  // requester: of the last frame received
  StripeLayout recv_layout_;
  uint64_t recv_tag_ = 0;
  StripeLayout in_layout_, out_layout_;  // executor: of the current frame in each direction
};

}  // namespace

void TuneTcpSocket(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  int idle = 10, intvl = 5, cnt = 3;
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
  // No SO_SNDBUF/SO_RCVBUF: setting them turns off the kernel's buffer autotuning and caps
  // the buffers at net.core.[rw]mem_max, which halves bulk throughput.
}

std::string SocketPeerName(int fd) {
  struct sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  if (getpeername(fd, reinterpret_cast<struct sockaddr*>(&ss), &len) != 0) return "?";
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (ss.ss_family == AF_INET) {
    auto* a = reinterpret_cast<struct sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<struct sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    port = ntohs(a->sin6_port);
    return fmt::format("[{}]:{}", host, port);
  } else {
    return "local";
  }
  return fmt::format("{}:{}", host, port);
}

std::unique_ptr<Connection> MakeTcpRequester(Fd sock, std::string peer, std::vector<Fd> data) {
  return std::make_unique<TcpConnection>(std::move(sock), std::move(peer), std::move(data), true);
}

Result<std::unique_ptr<Connection>> MakeTcpExecutor(Fd sock, std::vector<Fd> data) {
  int flags = fcntl(sock.get(), F_GETFL);
  if (flags < 0 || fcntl(sock.get(), F_SETFL, flags | O_NONBLOCK) < 0)
    return ErrnoStatus(Err::kUnknown, "fcntl(O_NONBLOCK)", errno);
  std::string peer = SocketPeerName(sock.get());
  for (Fd& d : data) {
    // The stripes' threads block on their connections.
    int f = fcntl(d.get(), F_GETFL);
    if (f < 0 || fcntl(d.get(), F_SETFL, f & ~O_NONBLOCK) < 0) return ErrnoStatus(Err::kUnknown, "fcntl", errno);
    TuneTcpSocket(d.get());
  }
  return std::unique_ptr<Connection>(
      std::make_unique<TcpConnection>(std::move(sock), std::move(peer), std::move(data), false));
}

Result<Fd> TcpConnect(const std::string& host, uint16_t port, int timeout_ms) {
  struct addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  struct addrinfo* res = nullptr;
  std::string port_s = std::to_string(port);
  int rc = getaddrinfo(host.c_str(), port_s.c_str(), &hints, &res);
  if (rc != 0) return Error(Err::kDevicesUnavailable, "cannot resolve {}: {}", host, gai_strerror(rc));
  Status last = Error(Err::kDevicesUnavailable, "no address for {}", host);
  for (struct addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
    if (!fd) continue;
    int r = ::connect(fd.get(), ai->ai_addr, ai->ai_addrlen);
    if (r != 0 && errno == EINPROGRESS) {
      struct pollfd p = {fd.get(), POLLOUT, 0};
      r = ::poll(&p, 1, timeout_ms);
      if (r == 0) {
        last = Error(Err::kDevicesUnavailable, "connecting to {}:{} timed out", host, port);
        continue;
      }
      int err = 0;
      socklen_t len = sizeof(err);
      getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      r = err == 0 ? 0 : -1;
      errno = err;
    }
    if (r != 0) {
      last = ErrnoStatus(Err::kDevicesUnavailable, fmt::format("connect to {}:{}", host, port), errno);
      continue;
    }
    fcntl(fd.get(), F_SETFL, fcntl(fd.get(), F_GETFL) & ~O_NONBLOCK);
    TuneTcpSocket(fd.get());
    freeaddrinfo(res);
    return fd;
  }
  freeaddrinfo(res);
  return last;
}

namespace {

class TcpListener final : public Listener {
 public:
  TcpListener(Fd fd, Endpoint ep, TransportKind kind) : fd_(std::move(fd)), ep_(std::move(ep)), kind_(kind) {}
  int fd() const override { return fd_.get(); }
  const Endpoint& endpoint() const override { return ep_; }
  Result<PendingConnection> Accept() override {
    Fd c(::accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!c) return AcceptError(errno);
    TuneTcpSocket(c.get());
    PendingConnection p;
    p.kind = kind_;
    p.peer = SocketPeerName(c.get());
    p.socket = std::move(c);
    return p;
  }

 private:
  Fd fd_;
  Endpoint ep_;
  TransportKind kind_;
};

}  // namespace

Result<std::unique_ptr<Listener>> TcpListen(const Endpoint& endpoint, TransportKind kind) {
  struct addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  struct addrinfo* res = nullptr;
  std::string port_s = std::to_string(endpoint.port);
  const char* host = endpoint.host.empty() || endpoint.host == "*" ? nullptr : endpoint.host.c_str();
  int rc = getaddrinfo(host, port_s.c_str(), &hints, &res);
  if (rc != 0) return Error(Err::kInvalidValue, "cannot resolve {}: {}", endpoint.host, gai_strerror(rc));
  Status last = Error(Err::kInvalidValue, "no address to listen on for {}", endpoint.ToUrl());
  for (struct addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
    if (!fd) continue;
    int one = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd.get(), SOMAXCONN) != 0) {
      last = ErrnoStatus(Err::kInvalidValue, fmt::format("listen on {}", endpoint.ToUrl()), errno);
      continue;
    }
    Endpoint actual = endpoint;
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    if (getsockname(fd.get(), reinterpret_cast<struct sockaddr*>(&ss), &len) == 0)
      actual.port = ntohs(ss.ss_family == AF_INET ? reinterpret_cast<struct sockaddr_in*>(&ss)->sin_port
                                                  : reinterpret_cast<struct sockaddr_in6*>(&ss)->sin6_port);
    freeaddrinfo(res);
    return std::unique_ptr<Listener>(std::make_unique<TcpListener>(std::move(fd), actual, kind));
  }
  freeaddrinfo(res);
  return last;
}

}  // namespace remora
