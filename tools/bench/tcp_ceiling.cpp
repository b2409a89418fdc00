#include "tcp_ceiling.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

namespace remora::bench {
namespace {

struct Socket {
  int fd = -1;
  Socket() = default;
  explicit Socket(int f) : fd(f) {}
  Socket(Socket&& o) noexcept : fd(o.fd) { o.fd = -1; }
  Socket& operator=(Socket&& o) noexcept {
    std::swap(fd, o.fd);
    return *this;
  }
  ~Socket() {
    if (fd >= 0) ::close(fd);
  }
};

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

// N connected pairs over 127.0.0.1 (TCP_NODELAY, autotuned buffers, like Remora's sockets).
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

}  // namespace

std::vector<CeilingPoint> measure_tcp_ceiling(const std::vector<int>& streams, uint64_t bytes, int reps) {
  std::vector<CeilingPoint> out;
  std::vector<char> src(bytes, 'r'), dst(bytes);
  for (int n : streams) {
    CeilingPoint p;
    p.streams = n;
    std::vector<Socket> tx, rx;
    if (!connect_pairs(n, &tx, &rx, &p.error)) {
      out.push_back(p);
      continue;
    }
    uint64_t part = (bytes + n - 1) / n;
    double best = 0;
    for (int r = 0; r < reps + 1; r++) {  // the first round warms up the connections
      bool ok = true;
      auto t0 = std::chrono::steady_clock::now();
      std::vector<std::thread> threads;
      std::vector<char> good(2 * n, 1);
      for (int i = 0; i < n; i++) {
        uint64_t off = part * i, len = off >= bytes ? 0 : std::min(part, bytes - off);
        threads.emplace_back([&, i, off, len] { good[2 * i] = write_all(tx[i].fd, src.data() + off, len); });
        threads.emplace_back([&, i, off, len] { good[2 * i + 1] = read_all(rx[i].fd, dst.data() + off, len); });
      }
      for (auto& t : threads) t.join();
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      for (char g : good) ok = ok && g;
      if (!ok) {
        p.error = "a loopback transfer failed";
        break;
      }
      if (r > 0) best = std::max(best, static_cast<double>(bytes) / s / 1e9);
    }
    if (p.error.empty()) p.gb_per_s = best;
    out.push_back(p);
  }
  return out;
}

}  // namespace remora::bench
