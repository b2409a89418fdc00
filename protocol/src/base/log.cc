#include "remora/base/log.h"

#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <string>

#include "remora/base/util.h"

namespace remora {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kWarn)};
std::atomic<int> g_fd{2};
std::mutex g_identity_mu;
std::string* g_identity = nullptr;  // leaked on purpose: usable during static destruction

const char* LevelName(LogLevel l) {
  switch (l) {
    case LogLevel::kError: return "E";
    case LogLevel::kWarn: return "W";
    case LogLevel::kInfo: return "I";
    case LogLevel::kDebug: return "D";
    case LogLevel::kTrace: return "T";
  }
  return "?";
}

}  // namespace

void SetLogIdentity(std::string_view identity) {
  std::lock_guard<std::mutex> lock(g_identity_mu);
  if (g_identity == nullptr) g_identity = new std::string();
  g_identity->assign(identity);
}

void SetLogLevel(LogLevel level) { g_level.store(static_cast<int>(level)); }

void SetLogLevelFromEnv(LogLevel fallback) {
  LogLevel level = fallback;
  if (const char* e = std::getenv("REMORA_LOG")) {
    std::string_view v(e);
    if (v == "error") level = LogLevel::kError;
    else if (v == "warn") level = LogLevel::kWarn;
    else if (v == "info") level = LogLevel::kInfo;
    else if (v == "debug") level = LogLevel::kDebug;
    else if (v == "trace") level = LogLevel::kTrace;
  }
  SetLogLevel(level);
}

void SetLogFd(int fd) { g_fd.store(fd); }

bool LogEnabled(LogLevel level) { return static_cast<int>(level) <= g_level.load(std::memory_order_relaxed); }

void LogLine(LogLevel level, std::string_view message) {
  struct timeval tv;
  gettimeofday(&tv, nullptr);
  struct tm tm;
  localtime_r(&tv.tv_sec, &tm);
  std::string identity;
  {
    std::lock_guard<std::mutex> lock(g_identity_mu);
    identity = g_identity ? *g_identity : std::string("remora");
  }
  // One line per call, whatever the message holds: control bytes (a peer's newline or
  // terminal escape) are escaped and the message is cut at kMaxMessage bytes.
  constexpr size_t kMaxMessage = 4096;
  std::string text = EscapeControl(message.substr(0, kMaxMessage));
  if (message.size() > kMaxMessage) text += fmt::format("...({} bytes)", message.size());
  std::string line = fmt::format("{:02}:{:02}:{:02}.{:06} {} [{} {}] {}\n", tm.tm_hour, tm.tm_min,
                                 tm.tm_sec, static_cast<long>(tv.tv_usec), LevelName(level),
                                 EscapeControl(identity), getpid(), text);
  const char* p = line.data();
  size_t n = line.size();
  while (n > 0) {
    ssize_t w = ::write(g_fd.load(), p, n);
    if (w <= 0) break;
    p += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace remora
