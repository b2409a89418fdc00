// Budgets for log lines a peer can cause (docs/SECURITY.md, F10 and N6): a refusal, a report,
// anything logged once per request of a client, a worker or an unauthenticated connection is
// logged through a LogBudget, so that no peer can fill the log (or push other lines out of
// journald's rate limit) by repeating a request.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <utility>

#include "remora/base/log.h"
#include "remora/base/util.h"

namespace remora {

// At most `burst` lines per `period_s`; then one line saying how many were left out. Not
// thread-safe (one owner thread; SharedLogBudget for a process-wide one).
class LogBudget {
 public:
  LogBudget(int burst, int period_s) : burst_(burst), period_ns_(uint64_t(period_s) * 1'000'000'000) {}
  // True if this line may be logged; `suppressed` (when not null) gets the count of lines
  // left out since the last allowed one.
  bool Allow(uint64_t* suppressed = nullptr) {
    uint64_t now = MonotonicNanos();
    if (now - window_start_ > period_ns_) {
      window_start_ = now;
      used_ = 0;
    }
    if (used_ >= burst_) {
      dropped_++;
      return false;
    }
    used_++;
    if (suppressed != nullptr) *suppressed = dropped_;
    dropped_ = 0;
    return true;
  }

 private:
  int burst_;
  uint64_t period_ns_;
  uint64_t window_start_ = 0;
  int used_ = 0;
  uint64_t dropped_ = 0;
};

// A LogBudget any thread may use.
class SharedLogBudget {
 public:
  SharedLogBudget(int burst, int period_s) : budget_(burst, period_s) {}
  bool Allow(uint64_t* suppressed = nullptr) {
    std::lock_guard<std::mutex> lock(mu_);
    return budget_.Allow(suppressed);
  }

 private:
  std::mutex mu_;
  LogBudget budget_;
};

template <typename... Args>
void LogLeftOut(LogLevel level, uint64_t left_out, fmt::format_string<Args...> f, Args&&... args) {
  std::string m = fmt::format(f, std::forward<Args>(args)...);
  if (left_out > 0) m += fmt::format(" ({} similar lines left out)", left_out);
  LogLine(level, m);
}

}  // namespace remora

// LOG_PEER(budget, Warn, "format", args...): a line a peer can cause, within `budget` (a
// LogBudget or SharedLogBudget); the level is Error, Warn, Info or Debug.
#define LOG_PEER(budget, level, ...)                                                                   \
  do {                                                                                                 \
    uint64_t remora_left_out_ = 0;                                                                     \
    if (::remora::LogEnabled(::remora::LogLevel::k##level) && (budget).Allow(&remora_left_out_))       \
      ::remora::LogLeftOut(::remora::LogLevel::k##level, remora_left_out_, __VA_ARGS__);               \
  } while (0)
