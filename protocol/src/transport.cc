#include "remora/protocol/transport.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

#include "remora/base/util.h"
#include "remora/protocol/frame_socket.h"
#include "shm/shm_connection.h"
#include "tcp/tcp_connection.h"
#include "transport_internal.h"

namespace remora {

const char* TransportName(TransportKind kind) {
  switch (kind) {
    case TransportKind::kShm: return "shm";
    case TransportKind::kTcp: return "tcp";
    case TransportKind::kRdma: return "rdma";
  }
  return "?";
}

Status AcceptError(int err) {
  if (err == EAGAIN || err == EWOULDBLOCK || err == EINTR || err == ECONNABORTED)
    return Status(Err::kNotReady, "no connection waiting");
  if (err == EMFILE || err == ENFILE || err == ENOMEM || err == ENOBUFS)
    return ErrnoStatus(Err::kMemoryAllocation, "accept", err);
  return ErrnoStatus(Err::kUnknown, "accept", err);
}

bool PeerIsLoopback(int fd) {
  struct sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  if (::getpeername(fd, reinterpret_cast<struct sockaddr*>(&ss), &len) != 0) return false;
  if (ss.ss_family == AF_INET) {
    uint32_t a = ntohl(reinterpret_cast<struct sockaddr_in*>(&ss)->sin_addr.s_addr);
    return (a >> 24) == 127;
  }
  if (ss.ss_family == AF_INET6) {
    const struct in6_addr& a = reinterpret_cast<struct sockaddr_in6*>(&ss)->sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(&a)) return true;
    return IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127;
  }
  return ss.ss_family == AF_UNIX;
}

std::string Endpoint::ToUrl() const {
  if (kind == TransportKind::kShm) return "shm://" + path;
  std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return fmt::format("{}://{}:{}", TransportName(kind), h, port);
}

Result<Endpoint> ParseEndpoint(std::string_view url) {
  Endpoint ep;
  size_t sep = url.find("://");
  if (sep == std::string_view::npos)
    return Error(Err::kInvalidValue, "invalid server URL '{}': expected shm:///path, tcp://HOST:PORT or rdma://HOST:PORT", url);
  std::string_view scheme = url.substr(0, sep), rest = url.substr(sep + 3);
  if (scheme == "shm") {
    if (rest.empty() || rest[0] != '/') return Error(Err::kInvalidValue, "invalid shm URL '{}': expected shm:///absolute/path.sock", url);
    ep.kind = TransportKind::kShm;
    ep.path = std::string(rest);
    if (ep.path.size() >= sizeof(sockaddr_un::sun_path))
      return Error(Err::kInvalidValue, "shm socket path '{}' is too long", ep.path);
    return ep;
  }
  if (scheme == "tcp") ep.kind = TransportKind::kTcp;
  else if (scheme == "rdma") ep.kind = TransportKind::kRdma;
  else return Error(Err::kInvalidValue, "unknown transport '{}' in '{}' (use shm, tcp or rdma)", scheme, url);
  std::string_view host, port;
  if (!rest.empty() && rest[0] == '[') {
    size_t close = rest.find(']');
    if (close == std::string_view::npos || close + 1 >= rest.size() || rest[close + 1] != ':')
      return Error(Err::kInvalidValue, "invalid URL '{}'", url);
    host = rest.substr(1, close - 1);
    port = rest.substr(close + 2);
  } else {
    size_t colon = rest.rfind(':');
    if (colon == std::string_view::npos) return Error(Err::kInvalidValue, "invalid URL '{}': missing :PORT", url);
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
    if (host.find(':') != std::string_view::npos)
      return Error(Err::kInvalidValue, "invalid URL '{}': put an IPv6 address in brackets, e.g. tcp://[::1]:7070", url);
  }
  unsigned p = 0;
  auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
  if (ec != std::errc() || ptr != port.data() + port.size() || p > 65535 || host.empty())
    return Error(Err::kInvalidValue, "invalid URL '{}': bad host or port", url);
  ep.host = std::string(host);
  ep.port = static_cast<uint16_t>(p);
  return ep;
}

namespace {

Result<Fd> UnixConnect(const std::string& path) {
  Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return ErrnoStatus(Err::kDevicesUnavailable, "socket", errno);
  struct sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  if (::connect(fd.get(), reinterpret_cast<struct sockaddr*>(&addr), sizeof(addr)) != 0)
    return ErrnoStatus(Err::kDevicesUnavailable, fmt::format("cannot reach the Remora server at shm://{}", path), errno);
  return fd;
}

class UnixListener final : public Listener {
 public:
  UnixListener(Fd fd, Endpoint ep) : fd_(std::move(fd)), ep_(std::move(ep)) {}
  ~UnixListener() override { ::unlink(ep_.path.c_str()); }
  int fd() const override { return fd_.get(); }
  const Endpoint& endpoint() const override { return ep_; }
  Result<PendingConnection> Accept() override {
    Fd c(::accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!c) return AcceptError(errno);
    PendingConnection p;
    p.kind = TransportKind::kShm;
    struct ucred cred = {};
    socklen_t len = sizeof(cred);
    if (getsockopt(c.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0)
      p.peer = fmt::format("pid {} uid {}", cred.pid, cred.uid);
    p.socket = std::move(c);
    return p;
  }

 private:
  Fd fd_;
  Endpoint ep_;
};

Result<std::unique_ptr<Listener>> UnixListen(const Endpoint& ep, unsigned mode) {
  Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return ErrnoStatus(Err::kUnknown, "socket", errno);
  struct sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, ep.path.c_str(), sizeof(addr.sun_path) - 1);
  mode_t old = ::umask(0177);  // never reachable by others before the chmod below
  int rc = ::bind(fd.get(), reinterpret_cast<struct sockaddr*>(&addr), sizeof(addr));
  int err = errno;
  if (rc != 0 && err == EADDRINUSE) {
    // A file is there: replace it only if it is a stale socket of ours (nobody answers).
    struct stat st;
    if (::lstat(ep.path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode) || st.st_uid != ::geteuid()) {
      ::umask(old);
      return Error(Err::kInvalidValue, "{} exists and is not a socket of this user: not replacing it", ep.path);
    }
    if (UnixConnect(ep.path).ok()) {
      ::umask(old);
      return Error(Err::kInvalidValue, "{} is in use by another running server", ep.path);
    }
    ::unlink(ep.path.c_str());
    rc = ::bind(fd.get(), reinterpret_cast<struct sockaddr*>(&addr), sizeof(addr));
    err = errno;
  }
  ::umask(old);
  if (rc != 0) return ErrnoStatus(Err::kInvalidValue, fmt::format("bind {}", ep.path), err);
  if (::chmod(ep.path.c_str(), mode) != 0) return ErrnoStatus(Err::kInvalidValue, fmt::format("chmod {}", ep.path), errno);
  if (::listen(fd.get(), SOMAXCONN) != 0) return ErrnoStatus(Err::kInvalidValue, "listen", errno);
  return std::unique_ptr<Listener>(std::make_unique<UnixListener>(std::move(fd), ep));
}

}  // namespace

ClientHandshakeOptions HandshakeOptions(const ConnectOptions& o, bool can_encrypt) {
  ClientHandshakeOptions h;
  h.token = o.token;
  h.encrypt = o.encrypt;
  h.can_encrypt = can_encrypt;
  h.insecure_local = o.insecure_local;
  return h;
}

Result<Connected> Connect(const Endpoint& ep, const ConnectOptions& options) {
  Connected out;
  switch (ep.kind) {
    case TransportKind::kShm: {
      ASSIGN_OR_RETURN(Fd sock, UnixConnect(ep.path));
      ASSIGN_OR_RETURN(shm::Segment seg, shm::Segment::Create(shm::Geometry()));
      FrameSocket fs(sock.get());
      int seg_fd = seg.fd();
      ASSIGN_OR_RETURN(out.session, RunClientHandshake(fs, HandshakeOptions(options, false), std::span<const int>(&seg_fd, 1),
                                                       options.timeout_ms));
      out.connection = MakeShmRequester(std::move(sock), std::move(seg), ep.path);
      return out;
    }
    case TransportKind::kTcp: {
      ASSIGN_OR_RETURN(Fd sock, TcpConnect(ep.host, ep.port, options.timeout_ms));
      FrameSocket fs(sock.get());
      ASSIGN_OR_RETURN(out.session, RunClientHandshake(fs, HandshakeOptions(options, true), {}, options.timeout_ms));
      std::string peer = SocketPeerName(sock.get());
      out.connection = out.session.keys ? MakeSecureTcpRequester(std::move(sock), peer, *out.session.keys)
                                        : MakeTcpRequester(std::move(sock), peer);
      return out;
    }
    case TransportKind::kRdma:
      return RdmaConnect(ep, options);
  }
  return Error(Err::kInvalidValue, "unknown transport");
}

Result<std::unique_ptr<Listener>> Listen(const Endpoint& ep, unsigned shm_mode) {
  switch (ep.kind) {
    case TransportKind::kShm: return UnixListen(ep, shm_mode);
    case TransportKind::kTcp: return TcpListen(ep, TransportKind::kTcp);
    case TransportKind::kRdma: return RdmaListen(ep);
  }
  return Error(Err::kInvalidValue, "unknown transport");
}

Result<std::unique_ptr<Connection>> AdoptConnection(TransportKind kind, Fd socket, std::vector<Fd> fds,
                                                    const std::optional<SessionKeys>& keys) {
  if (keys && kind != TransportKind::kTcp) return Error(Err::kInvalidValue, "only tcp sessions are encrypted");
  switch (kind) {
    case TransportKind::kShm: {
      if (fds.size() != 1) return Error(Err::kInvalidValue, "shm client sent {} descriptors with its Hello, expected its segment", fds.size());
      ASSIGN_OR_RETURN(shm::Segment seg, shm::Segment::Attach(std::move(fds[0])));
      struct ucred cred = {};
      socklen_t len = sizeof(cred);
      std::string peer = getsockopt(socket.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0
                             ? fmt::format("pid {}", cred.pid) : "local";
      return MakeShmExecutor(std::move(socket), std::move(seg), peer);
    }
    case TransportKind::kTcp:
      return keys ? MakeSecureTcpExecutor(std::move(socket), *keys) : MakeTcpExecutor(std::move(socket));
    case TransportKind::kRdma:
      return RdmaAdopt(std::move(socket), std::move(fds));
  }
  return Error(Err::kInvalidValue, "unknown transport");
}

}  // namespace remora
