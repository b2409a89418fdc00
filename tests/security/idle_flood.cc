// Idle-connection floods (idle_flood.h).
#include "idle_flood.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <utility>
#include <vector>

namespace remora::security {

Fd ConnectFrom(int host, uint16_t port) {
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  struct sockaddr_in src = {};
  src.sin_family = AF_INET;
  src.sin_addr.s_addr = htonl(0x7f000000u | static_cast<uint32_t>(host));
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&src), sizeof(src)) != 0) return Fd();
  struct sockaddr_in dst = {};
  dst.sin_family = AF_INET;
  dst.sin_port = htons(port);
  dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&dst), sizeof(dst)) != 0) return Fd();
  return fd;
}

IdleFlood::IdleFlood(uint16_t port, int first_host, int hosts, int per_host)
    : thread_([=, this] { Run(port, first_host, hosts, per_host); }) {}

void IdleFlood::Stop() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

void IdleFlood::Run(uint16_t port, int first_host, int hosts, int per_host) {
  std::vector<std::pair<Fd, int>> conns;  // and the host each is from
  while (!stop_.load()) {
    for (int host = first_host; host < first_host + hosts; host++) {
      int mine = 0;
      for (auto& [fd, h] : conns) mine += h == host;
      for (; mine < per_host; mine++) {
        Fd fd = ConnectFrom(host, port);
        if (!fd) break;
        conns.emplace_back(std::move(fd), host);
        opened_++;
      }
    }
    std::vector<struct pollfd> p;
    for (auto& [fd, h] : conns) p.push_back({fd.get(), POLLIN, 0});
    ::poll(p.data(), p.size(), 100);
    for (size_t i = 0; i < p.size(); i++)
      if (p[i].revents & (POLLIN | POLLHUP | POLLERR)) {
        char buf[512];  // what a server says on closing (a 503, a reason) is read and dropped
        if (::recv(p[i].fd, buf, sizeof(buf), MSG_DONTWAIT) <= 0) {
          conns[i].first.reset();
          closed_by_server_++;
        }
      }
    conns.erase(std::remove_if(conns.begin(), conns.end(), [](auto& c) { return !c.first; }), conns.end());
  }
}

}  // namespace remora::security
