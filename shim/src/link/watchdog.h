// Watchdog: the client's half of the session's liveness (docs/ARCHITECTURE.md, "Failure
// model"). Two threads per session:
//  - the beat thread sends a heartbeat frame every kHeartbeatInterval, whatever the
//    application does (idle, or blocked waiting for a long kernel), so the worker knows the
//    client is alive; it may block in a send to a server that stopped reading, which is why
//    it is not the thread that judges the server;
//  - the watch thread receives frames when no application thread does (the worker's
//    heartbeats, notices) and gives the server up when nothing at all - no frame, no byte of
//    a reply streaming in - arrived for the deadline: pending and later calls then fail with
//    cudaErrorDevicesUnavailable (Client::GiveUp) instead of hanging.
// GPU work never trips it: the worker's loop sends heartbeats while kernels run.
// Ownership: owned by the Client it watches, destroyed (threads joined) before it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

namespace remora::shim {

class Client;

// How often each side sends a heartbeat; deadlines are at least 4 of these.
inline constexpr uint64_t kHeartbeatIntervalNs = 250'000'000;
// REMORA_DEADLINE_S: seconds without a sign of life from the server before its calls fail
// (default 10; 0 turns the watchdog off). Values under 1 s are raised to 1 s.
uint64_t DeadlineFromEnvironment();

class Watchdog {
 public:
  Watchdog(Client& client, uint64_t deadline_ns);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  void Beat();
  void Watch();

  Client& client_;
  const uint64_t deadline_ns_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // under mu_
  std::thread beat_, watch_;
};

}  // namespace remora::shim
