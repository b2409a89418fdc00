#include "common/admin_channel.h"

#include <poll.h>
#include <sodium.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include <kj/debug.h>

#include "remora/base/util.h"
#include "secure/aead.h"
#include "secure/handshake_crypto.h"

namespace remora::admin {
namespace {

constexpr char kHelloMagic[9] = "RMADMIN2";
constexpr char kRefusalMagic[9] = "RMADMNO!";
constexpr size_t kMagicBytes = 8;
static_assert(kChannelHelloBytes == kMagicBytes + handshake::kShareBytes);

using Hello = std::array<uint8_t, kChannelHelloBytes>;

Hello MakeHello(const handshake::KeyExchange& kx) {
  Hello h{};
  std::memcpy(h.data(), kHelloMagic, kMagicBytes);
  std::memcpy(h.data() + kMagicBytes, kx.share.data(), kx.share.size());
  return h;
}

// Both hellos as the transcript handshake::Derive hashes (5 words each).
bool DeriveKeys(const handshake::KeyExchange& mine, const Hello& theirs, const Hello& client_hello,
                const Hello& server_hello, ChannelKeys* out) {
  std::array<uint8_t, handshake::kShareBytes> share{};
  std::memcpy(share.data(), theirs.data() + kMagicBytes, share.size());
  uint64_t c[kChannelHelloBytes / 8], s[kChannelHelloBytes / 8];
  std::memcpy(c, client_hello.data(), sizeof(c));
  std::memcpy(s, server_hello.data(), sizeof(s));
  handshake::Derived d;
  if (!handshake::Derive(mine, share, c, s, &d)) return false;
  out->client_to_server = d.c2s;
  out->server_to_client = d.s2c;
  out->binding = d.binding;
  return true;
}

// Blocking I/O with one deadline for the whole exchange.
Status WaitFor(int fd, short events, uint64_t deadline_ns) {
  for (;;) {
    uint64_t now = MonotonicNanos();
    if (now >= deadline_ns) return Error(Err::kTimeout, "the admin server did not answer the key exchange in time");
    struct pollfd p = {fd, events, 0};
    int r = ::poll(&p, 1, static_cast<int>((deadline_ns - now) / 1'000'000) + 1);
    if (r > 0) return Status::Ok();
    if (r < 0 && errno != EINTR) return ErrnoStatus(Err::kDevicesUnavailable, "poll", errno);
  }
}

Status ReadExactly(int fd, void* buf, size_t n, uint64_t deadline_ns, const char* what) {
  auto* p = static_cast<uint8_t*>(buf);
  while (n > 0) {
    RETURN_IF_ERROR(WaitFor(fd, POLLIN, deadline_ns));
    ssize_t r = ::recv(fd, p, n, MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (r < 0) return ErrnoStatus(Err::kDevicesUnavailable, what, errno);
    if (r == 0)
      return Error(Err::kDevicesUnavailable,
                   "the admin server closed the connection during the key exchange ({}; a server older than this "
                   "client speaks no sealed admin channel)", what);
    p += r;
    n -= static_cast<size_t>(r);
  }
  return Status::Ok();
}

Status WriteExactly(int fd, const void* buf, size_t n, uint64_t deadline_ns) {
  auto* p = static_cast<const uint8_t*>(buf);
  while (n > 0) {
    RETURN_IF_ERROR(WaitFor(fd, POLLOUT, deadline_ns));
    ssize_t r = ::send(fd, p, n, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (r < 0) return ErrnoStatus(Err::kDevicesUnavailable, "send the admin key exchange", errno);
    p += r;
    n -= static_cast<size_t>(r);
  }
  return Status::Ok();
}

kj::Exception Broken(const char* why) { return KJ_EXCEPTION(DISCONNECTED, why); }

class SealedStream final : public kj::AsyncIoStream {
 public:
  SealedStream(kj::Own<kj::AsyncIoStream> inner, const SessionKey& send_key, const SessionKey& recv_key,
               std::function<void(const char*)> broken)
      : inner_(kj::mv(inner)), seal_(Cipher::kChaCha20Poly1305, send_key), open_(Cipher::kChaCha20Poly1305, recv_key),
        broken_(std::move(broken)) {}

  kj::Promise<size_t> tryRead(void* buffer, size_t min_bytes, size_t max_bytes) override {
    return ReadLoop(static_cast<kj::byte*>(buffer), min_bytes, max_bytes, 0);
  }

  kj::Promise<void> write(const void* buffer, size_t size) override {
    if (size == 0) return kj::READY_NOW;
    return SendSealed(static_cast<const uint8_t*>(buffer), size);
  }

  kj::Promise<void> write(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) override {
    std::vector<uint8_t> all;
    for (auto& p : pieces) all.insert(all.end(), p.begin(), p.end());
    if (all.empty()) return kj::READY_NOW;
    return SendSealed(all.data(), all.size());
  }

  kj::Promise<void> whenWriteDisconnected() override { return inner_->whenWriteDisconnected(); }
  void shutdownWrite() override { inner_->shutdownWrite(); }
  void abortRead() override { inner_->abortRead(); }
  void getsockopt(int level, int option, void* value, kj::uint* length) override {
    inner_->getsockopt(level, option, value, length);
  }
  void setsockopt(int level, int option, const void* value, kj::uint length) override {
    inner_->setsockopt(level, option, value, length);
  }
  void getsockname(struct sockaddr* addr, kj::uint* length) override { inner_->getsockname(addr, length); }
  void getpeername(struct sockaddr* addr, kj::uint* length) override { inner_->getpeername(addr, length); }

 private:
  // Seals [data, data+n) in records of at most kMaxRecord bytes, in order, and writes them
  // as one piece (kj allows one write at a time per stream; capnp's writer keeps to that).
  kj::Promise<void> SendSealed(const uint8_t* data, size_t n) {
    size_t records = (n + secure::kMaxRecord - 1) / secure::kMaxRecord;
    auto out = kj::heapArray<kj::byte>(n + records * secure::kRecordOverhead);
    size_t at = 0;
    for (size_t done = 0; done < n;) {
      size_t len = std::min(n - done, secure::kMaxRecord);
      seal_.Seal(data + done, len, out.begin() + at);
      done += len;
      at += len + secure::kRecordOverhead;
    }
    auto p = inner_->write(out.begin(), out.size());
    return p.attach(kj::mv(out));
  }

  kj::Promise<size_t> ReadLoop(kj::byte* out, size_t min_bytes, size_t max_bytes, size_t done) {
    size_t n = std::min(plain_len_ - plain_at_, max_bytes - done);
    if (n > 0) {
      std::memcpy(out + done, record_.data() + plain_at_, n);
      plain_at_ += n;
      done += n;
    }
    if (done >= min_bytes || done == max_bytes) return done;
    return NextRecord().then([this, out, min_bytes, max_bytes, done](bool got) -> kj::Promise<size_t> {
      if (!got) return done;  // the peer closed at a record boundary
      return ReadLoop(out, min_bytes, max_bytes, done);
    });
  }

  // Reads and opens the next record into record_; false at a clean end of the stream.
  kj::Promise<bool> NextRecord() {
    return inner_->tryRead(header_, 1, secure::kRecordHeader).then([this](size_t got) -> kj::Promise<bool> {
      if (got == 0) return false;
      kj::Promise<void> rest = got == secure::kRecordHeader
                                   ? kj::Promise<void>(kj::READY_NOW)
                                   : inner_->read(header_ + got, secure::kRecordHeader - got);
      return rest.then([this]() {
        size_t len = secure::RecordCipher::RecordLength(header_);
        if (len == 0) Fail("not a record of the sealed admin channel");
        record_.resize(len + secure::kTagBytes);
        return inner_->read(record_.data(), record_.size()).then([this, len]() {
          if (!open_.Open(header_, record_.data(), record_.data()))
            Fail("a record of the sealed admin channel does not open (altered, replayed or reordered on the way)");
          plain_len_ = len;
          plain_at_ = 0;
          return true;
        });
      });
    });
  }

  [[noreturn]] void Fail(const char* why) {
    if (broken_) broken_(why);
    kj::throwFatalException(Broken(why));
  }

  kj::Own<kj::AsyncIoStream> inner_;
  secure::RecordCipher seal_, open_;
  std::function<void(const char*)> broken_;
  uint8_t header_[secure::kRecordHeader] = {};
  std::vector<uint8_t> record_;
  size_t plain_len_ = 0, plain_at_ = 0;
};

// The server side's exchange state, kept alive by the promise chain.
struct ServerExchange {
  handshake::KeyExchange kx;
  Hello theirs{}, mine{};
};

}  // namespace

ChannelKeys::~ChannelKeys() {
  sodium_memzero(client_to_server.data(), client_to_server.size());
  sodium_memzero(server_to_client.data(), server_to_client.size());
  sodium_memzero(binding.data(), binding.size());
}

Result<ChannelKeys> ClientKeyExchange(int fd, int timeout_ms) {
  uint64_t deadline = MonotonicNanos() + uint64_t(std::max(timeout_ms, 1)) * 1'000'000;
  handshake::KeyExchange kx;
  Hello mine = MakeHello(kx);
  RETURN_IF_ERROR(WriteExactly(fd, mine.data(), mine.size(), deadline));
  Hello theirs{};
  RETURN_IF_ERROR(ReadExactly(fd, theirs.data(), kMagicBytes, deadline, "its first bytes"));
  if (std::memcmp(theirs.data(), kRefusalMagic, kMagicBytes) == 0) {
    uint8_t len_bytes[4];
    RETURN_IF_ERROR(ReadExactly(fd, len_bytes, sizeof(len_bytes), deadline, "a refusal"));
    uint32_t len = uint32_t{len_bytes[0]} | uint32_t{len_bytes[1]} << 8 | uint32_t{len_bytes[2]} << 16 |
                   uint32_t{len_bytes[3]} << 24;
    std::string text(std::min<size_t>(len, kMaxRefusalBytes), '\0');
    RETURN_IF_ERROR(ReadExactly(fd, text.data(), text.size(), deadline, "a refusal"));
    return Error(Err::kDevicesUnavailable, "the admin server refused the connection: {}", Printable(text));
  }
  if (std::memcmp(theirs.data(), kHelloMagic, kMagicBytes) != 0)
    return Error(Err::kDevicesUnavailable, "the admin server did not answer with a sealed admin channel (is it a "
                                           "Remora admin listener, and as new as this client?)");
  RETURN_IF_ERROR(ReadExactly(fd, theirs.data() + kMagicBytes, theirs.size() - kMagicBytes, deadline, "its key share"));
  ChannelKeys keys;
  if (!DeriveKeys(kx, theirs, mine, theirs, &keys))
    return Error(Err::kNotPermitted, "the admin server's key share is invalid (a low-order point)");
  return keys;
}

kj::Promise<void> ServerKeyExchange(kj::AsyncIoStream& raw, ChannelKeys& keys) {
  auto x = kj::heap<ServerExchange>();
  auto& ref = *x;
  return raw.read(ref.theirs.data(), ref.theirs.size())
      .then([&raw, &ref, &keys]() {
        if (std::memcmp(ref.theirs.data(), kHelloMagic, kMagicBytes) != 0)
          kj::throwFatalException(Broken("not a sealed admin channel hello (an older remoractl?)"));
        ref.mine = MakeHello(ref.kx);
        if (!DeriveKeys(ref.kx, ref.theirs, ref.theirs, ref.mine, &keys))
          kj::throwFatalException(Broken("the client's key share is invalid (a low-order point)"));
        return raw.write(ref.mine.data(), ref.mine.size());
      })
      .attach(kj::mv(x));
}

kj::Promise<void> SendRefusal(kj::AsyncIoStream& raw, const std::string& text) {
  std::string cut = text.substr(0, kMaxRefusalBytes);
  auto msg = kj::heapArray<kj::byte>(kMagicBytes + 4 + cut.size());
  std::memcpy(msg.begin(), kRefusalMagic, kMagicBytes);
  uint32_t len = static_cast<uint32_t>(cut.size());
  for (int i = 0; i < 4; i++) msg[kMagicBytes + i] = static_cast<kj::byte>(len >> (8 * i));
  std::memcpy(msg.begin() + kMagicBytes + 4, cut.data(), cut.size());
  auto p = raw.write(msg.begin(), msg.size());
  return p.attach(kj::mv(msg));
}

kj::Own<kj::AsyncIoStream> SealStream(kj::Own<kj::AsyncIoStream> raw, const ChannelKeys& keys, bool server_side,
                                      std::function<void(const char*)> broken) {
  const SessionKey& send = server_side ? keys.server_to_client : keys.client_to_server;
  const SessionKey& recv = server_side ? keys.client_to_server : keys.server_to_client;
  return kj::heap<SealedStream>(kj::mv(raw), send, recv, std::move(broken));
}

}  // namespace remora::admin
