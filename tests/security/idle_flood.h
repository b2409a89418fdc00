// Idle-connection floods for the security tests (N8: the admin TCP channel, /metrics): several
// loopback addresses each keep a number of silent connections to a server's port open, and
// re-open every one the server closes, until the flood is stopped.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>

#include "remora/base/fd.h"

namespace remora::security {

// A TCP connection to 127.0.0.1:port from the loopback address 127.0.0.`host` (another peer as
// far as the server can tell); an empty Fd if it could not be made. Blocking.
Fd ConnectFrom(int host, uint16_t port);

// The flood runs on a thread of its own from construction until Stop() or destruction; the
// counters may be read from any thread meanwhile.
class IdleFlood {
 public:
  // Addresses 127.0.0.`first_host` .. `first_host + hosts - 1`, `per_host` connections each.
  IdleFlood(uint16_t port, int first_host, int hosts, int per_host);
  ~IdleFlood() { Stop(); }
  IdleFlood(const IdleFlood&) = delete;
  IdleFlood& operator=(const IdleFlood&) = delete;

  // Ends the flood and closes its connections. Idempotent.
  void Stop();
  uint64_t opened() const { return opened_.load(); }
  uint64_t closed_by_server() const { return closed_by_server_.load(); }

 private:
  void Run(uint16_t port, int first_host, int hosts, int per_host);

  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> opened_{0}, closed_by_server_{0};
  std::thread thread_;
};

}  // namespace remora::security
