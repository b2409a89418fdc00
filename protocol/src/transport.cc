#include "remora/protocol/transport.h"

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
    if (!c) return ErrnoStatus(Err::kUnknown, "accept", errno);
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

Result<std::unique_ptr<Listener>> UnixListen(const Endpoint& ep) {
  Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return ErrnoStatus(Err::kUnknown, "socket", errno);
  struct sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, ep.path.c_str(), sizeof(addr.sun_path) - 1);
  if (::bind(fd.get(), reinterpret_cast<struct sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (errno != EADDRINUSE) return ErrnoStatus(Err::kInvalidValue, fmt::format("bind {}", ep.path), errno);
    // A socket file is there: replace it only if it is stale (nobody answers).
    if (UnixConnect(ep.path).ok())
      return Error(Err::kInvalidValue, "{} is in use by another running server", ep.path);
    ::unlink(ep.path.c_str());
    if (::bind(fd.get(), reinterpret_cast<struct sockaddr*>(&addr), sizeof(addr)) != 0)
      return ErrnoStatus(Err::kInvalidValue, fmt::format("bind {}", ep.path), errno);
  }
  if (::listen(fd.get(), 128) != 0) return ErrnoStatus(Err::kInvalidValue, "listen", errno);
  return std::unique_ptr<Listener>(std::make_unique<UnixListener>(std::move(fd), ep));
}

}  // namespace

Result<Connected> Connect(const Endpoint& ep, const ConnectOptions& options) {
  Connected out;
  switch (ep.kind) {
    case TransportKind::kShm: {
      ASSIGN_OR_RETURN(Fd sock, UnixConnect(ep.path));
      ASSIGN_OR_RETURN(shm::Segment seg, shm::Segment::Create(shm::Geometry()));
      FrameSocket fs(sock.get());
      int seg_fd = seg.fd();
      ASSIGN_OR_RETURN(out.session, RunClientHandshake(fs, options.token, std::span<const int>(&seg_fd, 1), options.timeout_ms));
      out.connection = MakeShmRequester(std::move(sock), std::move(seg), ep.path);
      return out;
    }
    case TransportKind::kTcp: {
      ASSIGN_OR_RETURN(Fd sock, TcpConnect(ep.host, ep.port, options.timeout_ms));
      FrameSocket fs(sock.get());
      ASSIGN_OR_RETURN(out.session, RunClientHandshake(fs, options.token, {}, options.timeout_ms));
      std::string peer = SocketPeerName(sock.get());
      out.connection = MakeTcpRequester(std::move(sock), peer);
      return out;
    }
    case TransportKind::kRdma:
      return RdmaConnect(ep, options);
  }
  return Error(Err::kInvalidValue, "unknown transport");
}

Result<std::unique_ptr<Listener>> Listen(const Endpoint& ep) {
  switch (ep.kind) {
    case TransportKind::kShm: return UnixListen(ep);
    case TransportKind::kTcp: return TcpListen(ep, TransportKind::kTcp);
    case TransportKind::kRdma: return RdmaListen(ep);
  }
  return Error(Err::kInvalidValue, "unknown transport");
}

Result<std::unique_ptr<Connection>> AdoptConnection(TransportKind kind, Fd socket, std::vector<Fd> fds) {
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
      return MakeTcpExecutor(std::move(socket));
    case TransportKind::kRdma:
      return RdmaAdopt(std::move(socket), std::move(fds));
  }
  return Error(Err::kInvalidValue, "unknown transport");
}

}  // namespace remora
