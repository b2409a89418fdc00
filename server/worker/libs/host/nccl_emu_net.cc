// The emulated NCCL's rendezvous and mesh (nccl_emu_net.h).
#include "worker/libs/host/nccl_emu_net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>

#include "remora/base/log.h"
#include "remora/base/util.h"
#include "remora/protocol/exact_io.h"

namespace remora::worker::emu_nccl {
namespace {

constexpr char kMagic[8] = {'R', 'M', 'E', 'M', 'U', 'N', 'C', '1'};
constexpr uint64_t kMaxMessage = 16ull << 30;
constexpr int kHelloMs = 5000;  // a connection that opened must say who it is by then

struct Address {
  uint32_t addr = 0;  // network order
  uint16_t port = 0;  // network order
};

// The emulation's unique id: magic, the root's address, the secret every rank proves.
struct IdLayout {
  char magic[8];
  Address root;
  uint8_t pad[2];
  uint8_t secret[16];
};
static_assert(sizeof(IdLayout) <= sizeof(ncclUniqueId));

struct Hello {  // a rank to the root, and to a lower rank
  char magic[8];
  uint8_t secret[16];
  int32_t rank;
  int32_t nranks;
  Address listen;
  uint8_t pad[2];
};

Status Errno(const char* what) { return ErrnoStatus(Err::kUnknown, what, errno); }

// Waits until `fd` is ready for `events` or `ms` passed (-1: no limit); false once `abort` is set
// or the time is up.
bool Wait(int fd, short events, int ms, const std::atomic<bool>* abort) {
  auto start = std::chrono::steady_clock::now();
  for (;;) {
    if (abort != nullptr && abort->load()) return false;
    int slice = 100;
    if (ms >= 0) {
      int left = ms - static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count());
      if (left <= 0) return false;
      slice = std::min(slice, left);
    }
    struct pollfd p = {fd, events, 0};
    int r = ::poll(&p, 1, slice);
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return false;
  }
}

bool ReadAll(int fd, void* out, size_t n, ExactIoLimits limits = {}) {
  return ReadExact(fd, out, n, limits) == ExactIo::kDone;
}

bool WriteAll(int fd, const void* data, size_t n) { return WriteExact(fd, data, n) == ExactIo::kDone; }

Result<Fd> Listen(Address* bound) {
  const char* host = std::getenv("REMORA_NCCL_EMU_HOST");
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return Errno("socket");
  struct sockaddr_in a = {};
  a.sin_family = AF_INET;
  if (::inet_pton(AF_INET, host != nullptr && *host ? host : "127.0.0.1", &a.sin_addr) != 1)
    return Error(Err::kInvalidValue, "REMORA_NCCL_EMU_HOST={} is not an IPv4 address", host);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return Errno("bind");
  if (::listen(fd.get(), 128) != 0) return Errno("listen");
  socklen_t len = sizeof(a);
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0) return Errno("getsockname");
  bound->addr = a.sin_addr.s_addr;
  bound->port = a.sin_port;
  return fd;
}

// Connects to `to`, trying again until it answers or `abort` is set.
Result<Fd> Connect(const Address& to, const std::atomic<bool>& abort) {
  for (int attempt = 0;; attempt++) {
    if (abort.load()) return Error(Err::kUnknown, "aborted");
    Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) return Errno("socket");
    struct sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = to.addr;
    a.sin_port = to.port;
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
      int one = 1;
      ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      return fd;
    }
    if (errno != ECONNREFUSED && errno != EINTR && errno != ETIMEDOUT) return Errno("connect");
    std::this_thread::sleep_for(std::chrono::milliseconds(attempt < 20 ? 10 : 100));
  }
}

Result<Fd> Accept(int listen_fd, const std::atomic<bool>* abort, int ms) {
  if (!Wait(listen_fd, POLLIN, ms, abort)) return Error(Err::kUnknown, "no connection");
  Fd fd(::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC));
  if (!fd) return Errno("accept");
  int one = 1;
  ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

bool SecretMatches(const uint8_t* a, const uint8_t* b) {
  uint8_t diff = 0;
  for (int i = 0; i < 16; i++) diff |= a[i] ^ b[i];
  return diff == 0;
}

}  // namespace

// ---- Root -----------------------------------------------------------------------------------------

Result<std::unique_ptr<Root>> Root::Start(ncclUniqueId* id) {
  std::unique_ptr<Root> r(new Root());
  Address bound;
  ASSIGN_OR_RETURN(r->listen_, Listen(&bound));
  if (::getrandom(r->secret_, sizeof(r->secret_), 0) != static_cast<ssize_t>(sizeof(r->secret_))) return Errno("getrandom");
  std::memset(id, 0, sizeof(*id));
  IdLayout layout = {};
  std::memcpy(layout.magic, kMagic, sizeof(kMagic));
  layout.root = bound;
  std::memcpy(layout.secret, r->secret_, sizeof(layout.secret));
  std::memcpy(id->internal, &layout, sizeof(layout));
  r->thread_ = std::thread([p = r.get()] { p->Serve(); });
  return r;
}

Root::~Root() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

void Root::Serve() {
  struct Joined {
    Fd fd;
    Hello hello;
  };
  std::vector<Joined> joined;
  int nranks = 0;
  while (!stop_.load()) {
    auto fd = Accept(listen_.get(), &stop_, -1);
    if (!fd.ok()) continue;
    Hello h = {};
    if (!ReadAll(fd->get(), &h, sizeof(h), {kHelloMs, &stop_}) || std::memcmp(h.magic, kMagic, sizeof(kMagic)) != 0 ||
        !SecretMatches(h.secret, secret_) || h.nranks < 1 || h.rank < 0 || h.rank >= h.nranks ||
        (nranks != 0 && h.nranks != nranks)) {
      LOG_WARN("emulated NCCL: a rank that does not match the communicator checked in: refused");
      continue;
    }
    bool twice = false;
    for (const Joined& j : joined) twice |= j.hello.rank == h.rank;
    if (twice) {
      LOG_WARN("emulated NCCL: rank {} checked in twice: refused", h.rank);
      continue;
    }
    nranks = h.nranks;
    joined.push_back(Joined{std::move(*fd), h});
    if (static_cast<int>(joined.size()) < nranks) continue;
    std::vector<Address> table(static_cast<size_t>(nranks));
    for (const Joined& j : joined) table[static_cast<size_t>(j.hello.rank)] = j.hello.listen;
    for (Joined& j : joined) (void)WriteAll(j.fd.get(), table.data(), table.size() * sizeof(Address));
    return;  // one communicator per unique id, as NCCL's
  }
}

// ---- Mesh -----------------------------------------------------------------------------------------

Result<std::shared_ptr<Mesh>> Mesh::Join(const ncclUniqueId& id, int nranks, int rank, const std::atomic<bool>& abort) {
  IdLayout layout;
  std::memcpy(&layout, id.internal, sizeof(layout));
  if (std::memcmp(layout.magic, kMagic, sizeof(kMagic)) != 0)
    return Status(Domain::kNccl, ncclInvalidArgument, "not a unique id of the emulated NCCL");
  std::shared_ptr<Mesh> m(new Mesh(nranks, rank));
  Address mine;
  ASSIGN_OR_RETURN(Fd listener, Listen(&mine));
  // Check in with the root; it answers every rank's address once all have.
  ASSIGN_OR_RETURN(Fd root, Connect(layout.root, abort));
  Hello h = {};
  std::memcpy(h.magic, kMagic, sizeof(kMagic));
  std::memcpy(h.secret, layout.secret, sizeof(h.secret));
  h.rank = rank;
  h.nranks = nranks;
  h.listen = mine;
  if (!WriteAll(root.get(), &h, sizeof(h))) return Status(Domain::kNccl, ncclSystemError, "the unique id's root is gone");
  std::vector<Address> table(static_cast<size_t>(nranks));
  if (!ReadAll(root.get(), table.data(), table.size() * sizeof(Address), {-1, &abort}))
    return Status(Domain::kNccl, abort.load() ? ncclInternalError : ncclSystemError,
                  abort.load() ? "aborted while the ranks joined" : "the unique id's root refused this rank or is gone");
  m->peers_.resize(static_cast<size_t>(nranks));
  for (int j = 0; j < nranks; j++) m->send_mu_.push_back(std::make_unique<std::mutex>());
  m->lost_.assign(static_cast<size_t>(nranks), false);
  m->closed_.assign(static_cast<size_t>(nranks), false);
  const char* detect = std::getenv("REMORA_NCCL_EMU_DETECT_LOSS");
  m->detect_loss_ = detect != nullptr && std::strcmp(detect, "1") == 0;
  // The higher rank connects and proves the secret; the lower accepts.
  for (int j = 0; j < rank; j++) {
    ASSIGN_OR_RETURN(Fd fd, Connect(table[static_cast<size_t>(j)], abort));
    if (!WriteAll(fd.get(), &h, sizeof(h))) return Status(Domain::kNccl, ncclRemoteError, "a rank left while joining");
    m->peers_[static_cast<size_t>(j)] = std::move(fd);
  }
  for (int n = 0; n < nranks - 1 - rank;) {
    auto fd = Accept(listener.get(), &abort, -1);
    if (!fd.ok()) {
      if (abort.load()) return Status(Domain::kNccl, ncclInternalError, "aborted while the ranks joined");
      continue;
    }
    Hello p = {};
    if (!ReadAll(fd->get(), &p, sizeof(p), {kHelloMs, &abort}) || !SecretMatches(p.secret, layout.secret) ||
        p.rank <= rank || p.rank >= nranks || m->peers_[static_cast<size_t>(p.rank)].valid())
      continue;  // not one of ours
    m->peers_[static_cast<size_t>(p.rank)] = std::move(*fd);
    n++;
  }
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) return Errno("pipe2");
  m->wake_[0].reset(pipefd[0]);
  m->wake_[1].reset(pipefd[1]);
  m->progress_ = std::thread([p = m.get()] { p->Progress(); });
  return m;
}

Mesh::~Mesh() {
  Abort("the communicator ended");
  if (progress_.joinable()) progress_.join();
}

Status Mesh::Send(int peer, const Key& key, const void* data, size_t n) {
  if (peer == rank_) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto* b = static_cast<const std::byte*>(data);
    mail_[{peer, key}] = std::vector<std::byte>(b, b + n);
    cv_.notify_all();
    return Status::Ok();
  }
  RETURN_IF_ERROR(Health());
  uint8_t header[25];
  std::memcpy(header, &key.channel, 8);
  header[8] = key.kind;
  std::memcpy(header + 9, &key.seq, 8);
  uint64_t len = n;
  std::memcpy(header + 17, &len, 8);
  std::lock_guard<std::mutex> lock(*send_mu_[static_cast<size_t>(peer)]);
  int fd = peers_[static_cast<size_t>(peer)].get();
  if (!WriteAll(fd, header, sizeof(header)) || !WriteAll(fd, data, n)) {
    std::lock_guard<std::mutex> l(mu_);
    lost_[static_cast<size_t>(peer)] = true;
    cv_.notify_all();
    return Status(Domain::kNccl, ncclRemoteError, fmt::format("rank {}'s connection broke", peer));
  }
  return Status::Ok();
}

Result<std::vector<std::byte>> Mesh::Receive(int peer, const Key& key, const std::atomic<bool>* stop) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    auto it = mail_.find({peer, key});
    if (it != mail_.end()) {
      std::vector<std::byte> out = std::move(it->second);
      mail_.erase(it);
      return out;
    }
    if (aborted_) return Status(Domain::kNccl, ncclRemoteError, why_);
    if (stop != nullptr && stop->load()) return Status(Domain::kNccl, ncclRemoteError, "the communicator was aborted");
    if (lost_[static_cast<size_t>(peer)])
      return Status(Domain::kNccl, ncclRemoteError, fmt::format("rank {} is gone (its connection closed)", peer));
    cv_.wait(lock);
  }
}

void Mesh::Abort(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_) return;
    aborted_ = true;
    why_ = why;
    cv_.notify_all();
  }
  for (Fd& fd : peers_)
    if (fd) ::shutdown(fd.get(), SHUT_RDWR);
  if (wake_[1]) (void)!::write(wake_[1].get(), "x", 1);
}

Status Mesh::Health() {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_) return Status(Domain::kNccl, ncclRemoteError, why_);
  for (int j = 0; j < nranks_; j++)
    if (lost_[static_cast<size_t>(j)])
      return Status(Domain::kNccl, ncclRemoteError, fmt::format("rank {} of the communicator is gone", j));
  return Status::Ok();
}

bool Mesh::ReadFrom(int peer) {
  int fd = peers_[static_cast<size_t>(peer)].get();
  uint8_t header[25];
  if (!ReadAll(fd, header, sizeof(header))) return false;
  Key key;
  std::memcpy(&key.channel, header, 8);
  key.kind = header[8];
  std::memcpy(&key.seq, header + 9, 8);
  uint64_t len = 0;
  std::memcpy(&len, header + 17, 8);
  if (len > kMaxMessage) return false;
  std::vector<std::byte> data(static_cast<size_t>(len));
  if (len > 0 && !ReadAll(fd, data.data(), data.size())) return false;
  std::lock_guard<std::mutex> lock(mu_);
  mail_[{peer, key}] = std::move(data);
  cv_.notify_all();
  return true;
}

void Mesh::Progress() {
  std::vector<struct pollfd> fds;
  std::vector<int> who;
  for (;;) {
    fds.clear();
    who.clear();
    fds.push_back({wake_[0].get(), POLLIN, 0});
    who.push_back(-1);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (aborted_) return;
      for (int j = 0; j < nranks_; j++)
        if (j != rank_ && !lost_[static_cast<size_t>(j)] && !closed_[static_cast<size_t>(j)]) {
          fds.push_back({peers_[static_cast<size_t>(j)].get(), POLLIN, 0});
          who.push_back(j);
        }
    }
    if (::poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) return;
    if (fds[0].revents != 0) return;
    for (size_t i = 1; i < fds.size(); i++) {
      if (fds[i].revents == 0) continue;
      if (!ReadFrom(who[i])) {
        std::lock_guard<std::mutex> lock(mu_);
        if (!aborted_) LOG_INFO("emulated NCCL: rank {} of {}: rank {}'s connection closed", rank_, nranks_, who[i]);
        closed_[static_cast<size_t>(who[i])] = true;
        if (detect_loss_) lost_[static_cast<size_t>(who[i])] = true;
        cv_.notify_all();
      }
    }
  }
}

}  // namespace remora::worker::emu_nccl
