// A TCP man in the middle for the security tests: clients connect to it, it connects each
// to the real server and forwards both ways, recording every byte (a passive observer of
// the wire). Optionally it hijacks: once the server's Welcome has passed, it stops
// forwarding and sends its own bytes to the server on the client's authenticated
// connection (the review's relay attack, F6); or it tampers with the bytes it forwards.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace remora::security {

class Relay {
 public:
  // Hijack: called with the server-side socket once the handshake's second server frame
  // (the Welcome) has been forwarded; forwarding stops for that connection.
  using Hijack = std::function<void(int server_fd)>;
  // Tamper: may change (or add to) each chunk read before it is forwarded; `to_server` says
  // the direction, `offset` where the chunk starts in that direction's stream.
  using Tamper = std::function<void(bool to_server, uint64_t offset, std::string& chunk)>;

  Relay(std::string upstream_host, uint16_t upstream_port, Hijack hijack = nullptr, Tamper tamper = nullptr);
  ~Relay();
  Relay(const Relay&) = delete;
  Relay& operator=(const Relay&) = delete;

  std::string Url() const { return "tcp://127.0.0.1:" + std::to_string(port_); }
  // Everything seen so far, in each direction, over all connections.
  std::string ClientToServer();
  std::string ServerToClient();

 private:
  void AcceptLoop();
  void Serve(int client);

  std::string host_;
  uint16_t upstream_;
  Hijack hijack_;
  Tamper tamper_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::string c2s_, s2c_;
  std::vector<std::thread> threads_;
  std::thread acceptor_;
};

}  // namespace remora::security
