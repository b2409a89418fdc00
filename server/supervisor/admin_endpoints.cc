#include "supervisor/admin_endpoints.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <fcntl.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>

#include "remora/base/log.h"
#include "remora/base/util.h"
#include "remora/protocol/transport.h"

namespace remora::server {
namespace {

constexpr char kAdminTokenName[] = "admin";

}  // namespace

Result<Fd> BindUnix(const std::string& path) {
  struct sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) return Error(Err::kInvalidValue, "admin socket path too long: {}", path);
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return ErrnoStatus(Err::kInitializationError, "admin socket", errno);
  // A socket file that answers belongs to a running server on the same state directory.
  {
    Fd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (::connect(probe.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0)
      return Error(Err::kInitializationError, "another remora-server is serving {} (its admin socket answers)", path);
  }
  ::unlink(path.c_str());
  mode_t old = ::umask(0177);  // the socket is created 0600
  int rc = ::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  int err = errno;
  ::umask(old);
  if (rc != 0) return ErrnoStatus(Err::kInitializationError, "bind(" + path + ")", err);
  if (::chmod(path.c_str(), 0600) != 0 || ::listen(fd.get(), 16) != 0)
    return ErrnoStatus(Err::kInitializationError, "listen(" + path + ")", errno);
  return fd;
}

Result<Fd> BindTcp(const std::string& url, std::string* bound_url) {
  ASSIGN_OR_RETURN(Endpoint ep, ParseEndpoint(url));
  if (ep.kind != TransportKind::kTcp)
    return Error(Err::kInvalidValue, "--admin-listen needs a tcp://HOST:PORT URL, not {}", url);
  struct addrinfo hints = {}, *ai = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  int rc = ::getaddrinfo(ep.host.c_str(), std::to_string(ep.port).c_str(), &hints, &ai);
  if (rc != 0) return Error(Err::kInvalidValue, "admin listen address {}: {}", url, gai_strerror(rc));
  Fd fd(::socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  rc = fd ? ::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) : -1;
  int err = errno;
  ::freeaddrinfo(ai);
  // A backlog for bursts: who is served is decided after accept, by per-peer shares.
  if (rc != 0 || ::listen(fd.get(), 128) != 0)
    return ErrnoStatus(Err::kInitializationError, "bind(" + url + ")", rc != 0 ? err : errno);
  struct sockaddr_storage ss = {};
  socklen_t len = sizeof(ss);
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len);
  ep.port = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                           : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  *bound_url = ep.ToUrl();
  return fd;
}

Result<Verifier> LoadOrCreateAdminToken(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd && errno == ENOENT) {
    Token t{kAdminTokenName, RandomSecret()};
    std::string text = FormatToken(t) + "\n";
    Fd out(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!out) return ErrnoStatus(Err::kInitializationError, "create admin token file " + path, errno);
    if (::write(out.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()) || ::fsync(out.get()) != 0)
      return ErrnoStatus(Err::kInitializationError, "write admin token file " + path, errno);
    LOG_INFO("admin token created in {} (mode 0600)", path);
    return VerifierFor(t.secret);
  }
  if (!fd) return ErrnoStatus(Err::kInitializationError, "admin token file " + path + " (symbolic links are refused)", errno);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus(Err::kInitializationError, "stat admin token file " + path, errno);
  if (!S_ISREG(st.st_mode)) return Error(Err::kInitializationError, "admin token file {} is not a regular file", path);
  if (st.st_uid != ::geteuid())
    return Error(Err::kInitializationError, "admin token file {} belongs to uid {}, not to this server (uid {})", path,
                 st.st_uid, ::geteuid());
  if ((st.st_mode & 077) != 0)
    return Error(Err::kInitializationError, "admin token file {} is accessible to other users (mode {:o}): chmod 600 it",
                 path, st.st_mode & 0777);
  char buf[256];
  ssize_t n = ::read(fd.get(), buf, sizeof(buf) - 1);
  if (n <= 0) return Error(Err::kInitializationError, "cannot read admin token file {}", path);
  std::string text(buf, static_cast<size_t>(n));
  text = text.substr(0, text.find('\n'));
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  auto tok = ParseToken(text);
  if (!tok.ok() || tok->tenant != kAdminTokenName)
    return Error(Err::kInitializationError, "admin token file {} does not hold an admin token (remora1.admin.<secret>)",
                 path);
  return VerifierFor(tok->secret);
}

}  // namespace remora::server
