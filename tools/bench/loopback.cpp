#include "loopback.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace remora::bench {

Socket::~Socket() {
  if (fd >= 0) ::close(fd);
}

bool write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool read_all(int fd, char* p, size_t n) {
  while (n > 0) {
    ssize_t r = ::recv(fd, p, n, MSG_WAITALL);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool read_all_spinning(int fd, char* p, size_t n) {
  struct pollfd w = {fd, POLLIN, 0};
  while (n > 0) {
    while (::poll(&w, 1, 0) == 0) {
    }
    ssize_t r = ::recv(fd, p, n, MSG_DONTWAIT);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool connect_pairs(int n, std::vector<Socket>* tx, std::vector<Socket>* rx, std::string* error) {
  Socket lst(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (lst.fd < 0 || ::bind(lst.fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(lst.fd, n) != 0 ||
      ::getsockname(lst.fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    *error = std::string("loopback listen: ") + std::strerror(errno);
    return false;
  }
  for (int i = 0; i < n; i++) {
    Socket c(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (c.fd < 0 || ::connect(c.fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      *error = std::string("loopback connect: ") + std::strerror(errno);
      return false;
    }
    Socket s(::accept(lst.fd, nullptr, nullptr));
    if (s.fd < 0) {
      *error = std::string("loopback accept: ") + std::strerror(errno);
      return false;
    }
    int one = 1;
    ::setsockopt(c.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    ::setsockopt(s.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    tx->push_back(std::move(c));
    rx->push_back(std::move(s));
  }
  return true;
}

}  // namespace remora::bench
