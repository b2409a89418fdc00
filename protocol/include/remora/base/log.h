// Minimal line logger shared by every Remora process and the shim.
//
// One line per call, written with a single write(2) to stderr (or the fd given to
// SetLogFd), so lines from several processes sharing a terminal do not interleave.
// Thread-safe. The level comes from REMORA_LOG (error|warn|info|debug|trace), default warn
// in the shim and info in servers (SetLogLevel).
#pragma once

#include <string_view>

#include <fmt/format.h>

namespace remora {

enum class LogLevel { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3, kTrace = 4 };

// Identity printed in every line, e.g. "remora-server" or "worker s12 tenant=a (host-emulated)".
void SetLogIdentity(std::string_view identity);
void SetLogLevel(LogLevel level);
// Reads REMORA_LOG; leaves `fallback` if unset or unknown.
void SetLogLevelFromEnv(LogLevel fallback);
void SetLogFd(int fd);
bool LogEnabled(LogLevel level);
void LogLine(LogLevel level, std::string_view message);

template <typename... Args>
void Log(LogLevel level, fmt::format_string<Args...> f, Args&&... args) {
  if (!LogEnabled(level)) return;
  LogLine(level, fmt::format(f, std::forward<Args>(args)...));
}

#define REMORA_LOG(level, ...)                                                   \
  do {                                                                           \
    if (::remora::LogEnabled(::remora::LogLevel::level)) ::remora::Log(::remora::LogLevel::level, __VA_ARGS__); \
  } while (0)
#define LOG_ERROR(...) REMORA_LOG(kError, __VA_ARGS__)
#define LOG_WARN(...) REMORA_LOG(kWarn, __VA_ARGS__)
#define LOG_INFO(...) REMORA_LOG(kInfo, __VA_ARGS__)
#define LOG_DEBUG(...) REMORA_LOG(kDebug, __VA_ARGS__)
#define LOG_TRACE(...) REMORA_LOG(kTrace, __VA_ARGS__)

}  // namespace remora
