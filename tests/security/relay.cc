#include "relay.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "remora/protocol/frame.h"

namespace remora::security {

Relay::Relay(std::string upstream_host, uint16_t upstream_port, Hijack hijack, Tamper tamper)
    : host_(std::move(upstream_host)), upstream_(upstream_port), hijack_(std::move(hijack)), tamper_(std::move(tamper)) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  ::listen(listen_fd_, 64);
  socklen_t len = sizeof(a);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
  port_ = ntohs(a.sin_port);
  acceptor_ = std::thread([this] { AcceptLoop(); });
}

Relay::~Relay() {
  stop_ = true;
  ::shutdown(listen_fd_, SHUT_RDWR);
  acceptor_.join();
  for (auto& t : threads_) t.join();
  ::close(listen_fd_);
}

std::string Relay::ClientToServer() {
  std::lock_guard<std::mutex> lock(mu_);
  return c2s_;
}

std::string Relay::ServerToClient() {
  std::lock_guard<std::mutex> lock(mu_);
  return s2c_;
}

void Relay::AcceptLoop() {
  while (!stop_) {
    struct pollfd p = {listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;
    threads_.emplace_back([this, c] { Serve(c); });
  }
}

void Relay::Serve(int client) {
  int server = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_port = htons(upstream_);
  ::inet_pton(AF_INET, host_.c_str(), &a.sin_addr);
  if (::connect(server, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(client);
    ::close(server);
    return;
  }
  // Counts whole handshake frames from the server (plaintext: header, then body).
  std::string pending;
  uint64_t offset[2] = {0, 0};  // bytes read so far from the client, from the server
  int server_frames = 0;
  bool hijacked = false;
  struct pollfd p[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
  char buf[65536];
  while (!stop_ && !hijacked) {
    if (::poll(p, 2, 100) <= 0) continue;
    bool done = false;
    for (int i = 0; i < 2 && !done; i++) {
      if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = ::read(p[i].fd, buf, sizeof(buf));
      if (n <= 0) {
        done = true;
        break;
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        (i == 0 ? c2s_ : s2c_).append(buf, static_cast<size_t>(n));
      }
      if (tamper_) {
        std::string chunk(buf, static_cast<size_t>(n));
        tamper_(i == 0, offset[i], chunk);
        offset[i] += static_cast<uint64_t>(n);
        (void)!::write(i == 0 ? server : client, chunk.data(), chunk.size());
      } else {
        (void)!::write(i == 0 ? server : client, buf, static_cast<size_t>(n));
      }
      if (i == 1 && hijack_ && server_frames < 2) {
        pending.append(buf, static_cast<size_t>(n));
        while (pending.size() >= sizeof(FrameHeader)) {
          FrameHeader h;
          std::memcpy(&h, pending.data(), sizeof(h));
          size_t whole = sizeof(h) + size_t{h.body_words} * 8;
          if (pending.size() < whole) break;
          pending.erase(0, whole);
          if (++server_frames == 2) break;
        }
        if (server_frames == 2) {
          hijacked = true;
          hijack_(server);
        }
      }
    }
    if (done) break;
  }
  ::close(client);
  ::close(server);
}

}  // namespace remora::security
