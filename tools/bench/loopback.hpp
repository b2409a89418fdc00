// Plain loopback TCP for the bench's raw measurements (no Remora code): connected pairs over
// 127.0.0.1 with TCP_NODELAY and autotuned buffers, like Remora's sockets, and blocking
// whole-buffer send and receive. Used by the TCP ceiling (tcp_ceiling.cpp) and the remoted
// copy floor (copy_floor.cpp).
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace remora::bench {

// Owns one descriptor.
struct Socket {
  int fd = -1;
  Socket() = default;
  explicit Socket(int f) : fd(f) {}
  Socket(Socket&& o) noexcept : fd(o.fd) { o.fd = -1; }
  Socket& operator=(Socket&& o) noexcept {
    std::swap(fd, o.fd);
    return *this;
  }
  ~Socket();
};

// Blocking; false when the peer is gone or the call failed.
bool write_all(int fd, const char* p, size_t n);
bool read_all(int fd, char* p, size_t n);
// read_all, but waits by spinning on poll() (no sleep, so no wake-up on arrival), as
// Remora's transports do for a reply that comes within microseconds.
bool read_all_spinning(int fd, char* p, size_t n);
// N connected pairs (tx[i] to rx[i]); false with `error` set when one could not be made.
bool connect_pairs(int n, std::vector<Socket>* tx, std::vector<Socket>* rx, std::string* error);

}  // namespace remora::bench
