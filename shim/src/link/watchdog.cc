#include "watchdog.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "client.h"
#include "remora/base/log.h"
#include "remora/base/util.h"

namespace remora::shim {

uint64_t DeadlineFromEnvironment() {
  constexpr uint64_t kDefault = 10'000'000'000;
  const char* e = std::getenv("REMORA_DEADLINE_S");
  if (e == nullptr || *e == '\0') return kDefault;
  char* end = nullptr;
  double s = std::strtod(e, &end);
  if (end == e || *end != '\0' || !(s >= 0) || s > 86400 * 365) {
    LOG_WARN("REMORA_DEADLINE_S={} is not a number of seconds: using the default of 10", e);
    return kDefault;
  }
  if (s == 0) return 0;
  return std::max<uint64_t>(static_cast<uint64_t>(s * 1e9), 4 * kHeartbeatIntervalNs);
}

Watchdog::Watchdog(Client& client, uint64_t deadline_ns) : client_(client), deadline_ns_(deadline_ns) {
  beat_ = std::thread([this] { Beat(); });
  watch_ = std::thread([this] { Watch(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  // A beat blocked in a send to a stopped server returns once the watch thread gives it up;
  // at shutdown the session's connection closes after this, so join the watcher first.
  watch_.join();
  beat_.join();
}

void Watchdog::Beat() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, std::chrono::nanoseconds(kHeartbeatIntervalNs));
    if (stop_) break;
    lock.unlock();
    bool ok = client_.broken().ok() && client_.SendHeartbeat().ok();
    lock.lock();
    if (!ok) break;  // the session is over: nothing to keep alive
  }
}

void Watchdog::Watch() {
  uint64_t progress = client_.receive_progress();
  uint64_t progress_at = MonotonicNanos();
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
    }
    if (!client_.broken().ok()) return;
    // Takes in what an idle session has been sent (an application thread waiting for a
    // reply receives for everyone itself; taking its turn would cost it a wake-up).
    client_.PollIdle();
    uint64_t now = MonotonicNanos();
    uint64_t p = client_.receive_progress();
    if (p != progress) {
      progress = p;
      progress_at = now;
    }
    uint64_t heard = std::max(client_.last_heard_ns(), progress_at);
    if (now > heard && now - heard > deadline_ns_) {
      client_.GiveUp(Error(Err::kDevicesUnavailable, "the Remora server has not answered for {:.1f} s (deadline {:.1f} s, "
                                                     "REMORA_DEADLINE_S): giving the session up",
                           double(now - heard) / 1e9, double(deadline_ns_) / 1e9));
      return;
    }
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::nanoseconds(kHeartbeatIntervalNs / 2), [&] { return stop_; });
  }
}

}  // namespace remora::shim
