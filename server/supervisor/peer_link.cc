// PeerLinks (peer_link.h).
#include "supervisor/peer_link.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sodium.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>

#include "remora/base/log.h"
#include "remora/base/util.h"
#include "remora/protocol/exact_io.h"
#include "remora/protocol/transport.h"

namespace remora::server {
namespace {

constexpr char kMagic[8] = {'R', 'M', 'P', 'E', 'E', 'R', '0', '1'};
constexpr int kHandshakeMs = 5000;
constexpr int kBeatMs = 250;
constexpr uint32_t kMaxFrame = 1u << 20;

using Key32 = std::array<uint8_t, 32>;

uint64_t NowMs() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

// The exchange's reads and writes, and the rest of a frame once its first bytes came: within
// kHandshakeMs, and ended by the links' stop.
bool ReadAll(int fd, void* out, size_t n, const std::atomic<bool>& stop) {
  return ReadExact(fd, out, n, {kHandshakeMs, &stop}) == ExactIo::kDone;
}

bool WriteAll(int fd, const void* data, size_t n, const std::atomic<bool>& stop) {
  return WriteExact(fd, data, n, {kHandshakeMs, &stop}) == ExactIo::kDone;
}

Key32 Hmac(const Key32& key, std::string_view label, std::initializer_list<std::pair<const void*, size_t>> parts) {
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, key.data(), key.size());
  crypto_auth_hmacsha256_update(&st, reinterpret_cast<const uint8_t*>(label.data()), label.size());
  for (auto [p, n] : parts) crypto_auth_hmacsha256_update(&st, static_cast<const uint8_t*>(p), n);
  Key32 out;
  crypto_auth_hmacsha256_final(&st, out.data());
  return out;
}

Result<Key32> ReadKey(const std::string& file) {
  struct stat st;
  if (::stat(file.c_str(), &st) != 0) return ErrnoStatus(Err::kInvalidValue, "--peer-key-file " + file, errno);
  if ((st.st_mode & 077) != 0)
    return Error(Err::kInvalidValue, "--peer-key-file {} is readable by others (mode {:o}): make it 0600", file, st.st_mode & 0777);
  std::ifstream in(file, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.pop_back();
  if (text.size() < 32) return Error(Err::kInvalidValue, "--peer-key-file {} holds {} bytes: at least 32 are needed", file, text.size());
  Key32 key;
  crypto_generichash(key.data(), key.size(), reinterpret_cast<const uint8_t*>(text.data()), text.size(), nullptr, 0);
  sodium_memzero(text.data(), text.size());
  return key;
}

Result<Fd> ConnectTo(const std::string& address, const std::atomic<bool>& stop) {
  ASSIGN_OR_RETURN(Endpoint ep, ParseEndpoint("tcp://" + address));
  struct addrinfo hints = {}, *res = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  std::string port = std::to_string(ep.port);
  if (int rc = ::getaddrinfo(ep.host.c_str(), port.c_str(), &hints, &res); rc != 0)
    return Error(Err::kInvalidValue, "peer {}: {}", address, ::gai_strerror(rc));
  Status last = Error(Err::kUnknown, "peer {}: no address", address);
  for (auto* a = res; a != nullptr && !stop.load(); a = a->ai_next) {
    Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol));
    if (!fd) continue;
    if (::connect(fd.get(), a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
      last = ErrnoStatus(Err::kUnknown, "connect to peer " + address, errno);
      continue;
    }
    struct pollfd pf = {fd.get(), POLLOUT, 0};
    int err = 0;
    socklen_t len = sizeof(err);
    if (::poll(&pf, 1, kHandshakeMs) <= 0 || ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
      last = ErrnoStatus(Err::kUnknown, "connect to peer " + address, err ? err : ETIMEDOUT);
      continue;
    }
    ::fcntl(fd.get(), F_SETFL, ::fcntl(fd.get(), F_GETFL) & ~O_NONBLOCK);
    ::freeaddrinfo(res);
    return fd;
  }
  ::freeaddrinfo(res);
  return last;
}

}  // namespace

struct PeerLinks::Link {
  Link() {
    int p[2];
    if (::pipe2(p, O_CLOEXEC | O_NONBLOCK) == 0) {
      wake[0].reset(p[0]);
      wake[1].reset(p[1]);
    }
  }
  uint64_t id = 0;
  bool dialed = false;
  std::string address;  // dialed: where to
  Fd fd;
  std::thread thread;
  std::mutex mu;
  std::deque<std::vector<uint8_t>> out;
  Fd wake[2];  // made before the thread starts: Send writes to it from other threads
  std::atomic<bool> up{false}, down{false};
  uint64_t remote = 0;
};

PeerLinks::PeerLinks(const PeerOptions& o, uint64_t server_id, Poster post, Handlers h)
    : options_(o), server_id_(server_id), post_(std::move(post)), handlers_(std::move(h)) {}

Result<std::unique_ptr<PeerLinks>> PeerLinks::Start(const PeerOptions& options, uint64_t server_id, Poster post,
                                                   Handlers handlers) {
  if (sodium_init() < 0) return Error(Err::kInitializationError, "libsodium did not initialise");
  std::unique_ptr<PeerLinks> p(new PeerLinks(options, server_id, std::move(post), std::move(handlers)));
  ASSIGN_OR_RETURN(p->key_, ReadKey(options.key_file));
  for (const std::string& a : options.allowed) RETURN_IF_ERROR(ParseEndpoint("tcp://" + a).status());
  if (!options.listen.empty()) {
    ASSIGN_OR_RETURN(Endpoint ep, ParseEndpoint(options.listen));
    if (ep.kind != TransportKind::kTcp) return Error(Err::kInvalidValue, "--peer-listen {}: a tcp:// URL is needed", options.listen);
    struct addrinfo hints = {}, *res = nullptr;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    std::string port = std::to_string(ep.port);
    if (int rc = ::getaddrinfo(ep.host.c_str(), port.c_str(), &hints, &res); rc != 0)
      return Error(Err::kInvalidValue, "--peer-listen {}: {}", options.listen, ::gai_strerror(rc));
    p->listen_.reset(::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    int one = 1;
    ::setsockopt(p->listen_.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    int rc = ::bind(p->listen_.get(), res->ai_addr, res->ai_addrlen);
    ::freeaddrinfo(res);
    if (rc != 0 || ::listen(p->listen_.get(), 16) != 0)
      return ErrnoStatus(Err::kUnknown, "--peer-listen " + options.listen, errno);
    p->acceptor_ = std::thread([raw = p.get()] { raw->Accept(); });
    LOG_INFO("serving peer servers on {}", options.listen);
  }
  return p;
}

PeerLinks::~PeerLinks() {
  stop_.store(true);
  if (acceptor_.joinable()) acceptor_.join();
  std::map<uint64_t, std::shared_ptr<Link>> links;
  {
    std::lock_guard<std::mutex> lock(mu_);
    links.swap(links_);
  }
  for (auto& [id, l] : links) {
    if (l->wake[1]) (void)!::write(l->wake[1].get(), "x", 1);
    if (l->thread.joinable()) l->thread.join();
  }
  std::vector<std::thread> finished;
  {
    std::lock_guard<std::mutex> lock(mu_);
    finished.swap(finished_);
  }
  for (std::thread& t : finished)
    if (t.joinable()) t.join();
}

void PeerLinks::Accept() {
  while (!stop_.load()) {
    struct pollfd pf = {listen_.get(), POLLIN, 0};
    if (::poll(&pf, 1, 200) <= 0) continue;
    Fd fd(::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!fd) continue;
    auto l = std::make_shared<Link>();
    l->fd = std::move(fd);
    std::lock_guard<std::mutex> lock(mu_);
    if (links_.size() >= 256) continue;  // a server has few peers
    l->id = next_++;
    links_[l->id] = l;
    l->thread = std::thread([this, l] { RunLink(l); });
  }
}

Result<uint64_t> PeerLinks::Dial(const std::string& address) {
  bool allowed = false;
  for (const std::string& a : options_.allowed) allowed |= a == address;
  if (!allowed) return Error(Err::kNotPermitted, "peer {} is not one this server may reach (--peer)", Printable(address));
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, l] : links_)
    if (l->dialed && l->address == address && !l->down.load()) return id;
  auto l = std::make_shared<Link>();
  l->dialed = true;
  l->address = address;
  l->id = next_++;
  links_[l->id] = l;
  l->thread = std::thread([this, l] { RunLink(l); });
  return l->id;
}

void PeerLinks::Send(uint64_t link, std::vector<uint8_t> message) {
  std::shared_ptr<Link> l;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = links_.find(link);
    if (it == links_.end()) return;
    l = it->second;
  }
  if (l->down.load()) return;
  {
    std::lock_guard<std::mutex> lock(l->mu);
    l->out.push_back(std::move(message));
  }
  if (l->wake[1]) (void)!::write(l->wake[1].get(), "x", 1);
}

void PeerLinks::RunLink(std::shared_ptr<Link> l) {
  auto down = [&](const std::string& why) {
    l->down.store(true);
    uint64_t id = l->id, remote = l->remote;
    if (!stop_.load()) post_([this, id, remote, why] { handlers_.down(id, remote, why); });
    std::lock_guard<std::mutex> lock(mu_);
    // Forgotten; its thread (this one, ending) is joined by the destructor.
    auto it = links_.find(id);
    if (it != links_.end() && !stop_.load()) {
      finished_.push_back(std::move(it->second->thread));
      links_.erase(it);
    }
  };
  std::string who = l->dialed ? l->address : "a peer that connected";
  if (l->dialed) {
    auto fd = ConnectTo(l->address, stop_);
    if (!fd.ok()) return down(fd.status().message());
    l->fd = std::move(*fd);
  }
  int fd = l->fd.get();
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  // ---- the exchange: both prove the cluster key over fresh nonces, then a key per direction ----
  uint8_t hello_c[48], hello_s[48];
  Key32 mac{};
  if (l->dialed) {
    std::memcpy(hello_c, kMagic, 8);
    std::memcpy(hello_c + 8, &server_id_, 8);
    randombytes_buf(hello_c + 16, 32);
    if (!WriteAll(fd, hello_c, sizeof(hello_c), stop_) || !ReadAll(fd, hello_s, sizeof(hello_s), stop_) ||
        !ReadAll(fd, mac.data(), mac.size(), stop_))
      return down("the peer did not answer the exchange");
    Key32 want = Hmac(key_, "remora-peer accept", {{hello_c, 48}, {hello_s, 48}});
    if (std::memcmp(hello_s, kMagic, 8) != 0 || sodium_memcmp(want.data(), mac.data(), 32) != 0)
      return down("the peer does not know the cluster key (--peer-key-file)");
    Key32 mine = Hmac(key_, "remora-peer connect", {{hello_c, 48}, {hello_s, 48}});
    if (!WriteAll(fd, mine.data(), mine.size(), stop_)) return down("the peer closed during the exchange");
    std::memcpy(&l->remote, hello_s + 8, 8);
  } else {
    if (!ReadAll(fd, hello_c, sizeof(hello_c), stop_) || std::memcmp(hello_c, kMagic, 8) != 0)
      return down("a connection that is not a Remora server's");
    std::memcpy(hello_s, kMagic, 8);
    std::memcpy(hello_s + 8, &server_id_, 8);
    randombytes_buf(hello_s + 16, 32);
    Key32 mine = Hmac(key_, "remora-peer accept", {{hello_c, 48}, {hello_s, 48}});
    if (!WriteAll(fd, hello_s, sizeof(hello_s), stop_) || !WriteAll(fd, mine.data(), mine.size(), stop_) ||
        !ReadAll(fd, mac.data(), mac.size(), stop_))
      return down("the peer left during the exchange");
    Key32 want = Hmac(key_, "remora-peer connect", {{hello_c, 48}, {hello_s, 48}});
    if (sodium_memcmp(want.data(), mac.data(), 32) != 0) {
      LOG_WARN("a peer connection that does not know the cluster key was refused");
      return down("the peer does not know the cluster key");
    }
    std::memcpy(&l->remote, hello_c + 8, 8);
  }
  if (l->remote == server_id_) return down("a link to this server itself");
  Key32 c2s = Hmac(key_, "remora-peer c2s", {{hello_c + 16, 32}, {hello_s + 16, 32}});
  Key32 s2c = Hmac(key_, "remora-peer s2c", {{hello_c + 16, 32}, {hello_s + 16, 32}});
  const Key32& send_key = l->dialed ? c2s : s2c;
  const Key32& recv_key = l->dialed ? s2c : c2s;
  uint64_t send_n = 0, recv_n = 0;
  l->up.store(true);
  LOG_INFO("peer link {} to server {:x} ({}) is up", l->id, l->remote, who);
  auto seal = [&](const std::vector<uint8_t>& plain) {
    std::vector<uint8_t> frame(4 + crypto_secretbox_MACBYTES + plain.size());
    uint32_t len = static_cast<uint32_t>(crypto_secretbox_MACBYTES + plain.size());
    std::memcpy(frame.data(), &len, 4);
    uint8_t nonce[crypto_secretbox_NONCEBYTES] = {};
    std::memcpy(nonce, &send_n, 8);
    send_n++;
    crypto_secretbox_easy(frame.data() + 4, plain.data(), plain.size(), nonce, send_key.data());
    return frame;
  };
  uint64_t deadline_ms = static_cast<uint64_t>(options_.deadline_s * 1000);
  uint64_t heard = NowMs(), beat = 0;
  // A peer that does not take a frame within the deadline is as down as one that sends nothing.
  const int write_ms = deadline_ms > 0 ? static_cast<int>(deadline_ms) : -1;
  while (!stop_.load()) {
    uint64_t now = NowMs();
    if (deadline_ms > 0 && now - heard > deadline_ms)
      return down(fmt::format("server {:x} sent nothing for {:.1f} s", l->remote, double(now - heard) / 1000));
    std::deque<std::vector<uint8_t>> out;
    {
      std::lock_guard<std::mutex> lock(l->mu);
      out.swap(l->out);
    }
    if (now - beat >= kBeatMs) {
      out.emplace_back();  // an empty frame: the heartbeat
      beat = now;
    }
    for (auto& m : out)
      if (std::vector<uint8_t> frame = seal(m);
          WriteExact(fd, frame.data(), frame.size(), {write_ms, &stop_}) != ExactIo::kDone)
        return down(fmt::format("the connection to server {:x} broke or did not take a frame within the deadline", l->remote));
    struct pollfd pf[2] = {{fd, POLLIN, 0}, {l->wake[0].get(), POLLIN, 0}};
    if (::poll(pf, 2, kBeatMs / 2) < 0 && errno != EINTR) return down("poll failed");
    if (pf[1].revents != 0) {
      char buf[64];
      while (::read(l->wake[0].get(), buf, sizeof(buf)) > 0) {
      }
    }
    if (pf[0].revents == 0) continue;
    uint32_t len = 0;
    if (!ReadAll(fd, &len, 4, stop_) || len < crypto_secretbox_MACBYTES || len > kMaxFrame)
      return down(fmt::format("the connection to server {:x} closed", l->remote));
    std::vector<uint8_t> sealed(len), plain(len - crypto_secretbox_MACBYTES);
    if (!ReadAll(fd, sealed.data(), len, stop_)) return down(fmt::format("server {:x} sent half a frame", l->remote));
    uint8_t nonce[crypto_secretbox_NONCEBYTES] = {};
    std::memcpy(nonce, &recv_n, 8);
    recv_n++;
    if (crypto_secretbox_open_easy(plain.data(), sealed.data(), len, nonce, recv_key.data()) != 0)
      return down(fmt::format("a frame from server {:x} failed its authentication", l->remote));
    heard = NowMs();
    if (plain.empty()) continue;  // a heartbeat
    uint64_t id = l->id, remote = l->remote;
    post_([this, id, remote, m = std::move(plain)]() mutable { handlers_.message(id, remote, std::move(m)); });
  }
}

}  // namespace remora::server
