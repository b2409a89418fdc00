// The shm transport's entries: a unix socket carries the handshake (and the segment's memfd
// with the Hello); the data path is the shared segment (shm_connection.cc).
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "remora/base/util.h"
#include "remora/protocol/frame_socket.h"
#include "shm/shm_connection.h"
#include "transport_internal.h"

namespace remora {
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

Result<std::unique_ptr<Listener>> UnixListen(const Endpoint& ep, const ListenOptions& options) {
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
  if (::chmod(ep.path.c_str(), options.shm_mode) != 0)
    return ErrnoStatus(Err::kInvalidValue, fmt::format("chmod {}", ep.path), errno);
  if (::listen(fd.get(), SOMAXCONN) != 0) return ErrnoStatus(Err::kInvalidValue, "listen", errno);
  return std::unique_ptr<Listener>(std::make_unique<UnixListener>(std::move(fd), ep));
}

Result<Connected> ShmConnect(const Endpoint& ep, const ConnectOptions& options) {
  Connected out;
  ASSIGN_OR_RETURN(Fd sock, UnixConnect(ep.path));
  ASSIGN_OR_RETURN(shm::Segment seg, shm::Segment::Create(shm::Geometry()));
  FrameSocket fs(sock.get());
  int seg_fd = seg.fd();
  ASSIGN_OR_RETURN(out.session,
                   RunClientHandshake(fs, HandshakeOptions(options, false), std::span<const int>(&seg_fd, 1), options.timeout_ms));
  out.connection = MakeShmRequester(std::move(sock), std::move(seg), ep.path);
  return out;
}

Result<std::unique_ptr<Connection>> ShmAdopt(Fd socket, std::vector<Fd> fds, const std::optional<SessionKeys>& keys, int) {
  if (keys) return Error(Err::kInvalidValue, "shm:// sessions are not encrypted (their data never leaves the host)");
  if (fds.size() != 1) return Error(Err::kInvalidValue, "shm client sent {} descriptors with its Hello, expected its segment", fds.size());
  ASSIGN_OR_RETURN(shm::Segment seg, shm::Segment::Attach(std::move(fds[0])));
  struct ucred cred = {};
  socklen_t len = sizeof(cred);
  std::string peer = getsockopt(socket.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0
                         ? fmt::format("pid {}", cred.pid) : "local";
  return MakeShmExecutor(std::move(socket), std::move(seg), peer);
}

std::string Available() { return ""; }

}  // namespace

// Over shm the GPU reaches the client's pinned memory and the segment's staging slots directly.
const TransportOps kShmTransport = {"shm", TransportKind::kShm, "shared-memory", ShmConnect, UnixListen, ShmAdopt, Available};

}  // namespace remora
