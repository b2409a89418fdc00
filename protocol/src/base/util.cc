#include "remora/base/util.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace remora {

std::string Printable(std::string_view text, size_t max) {
  std::string out;
  for (size_t i = 0; i < text.size(); i++) {
    if (i == max) {
      out += "...";
      break;
    }
    auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c >= 0x7f || c == '\\') out += fmt::format("\\x{:02x}", c);
    else out += static_cast<char>(c);
  }
  return out;
}

Result<std::optional<uint64_t>> ParseSize(std::string_view text) {
  std::string t(text);
  while (!t.empty() && (t.back() == '\n' || t.back() == ' ' || t.back() == '\t')) t.pop_back();
  while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) t.erase(t.begin());
  if (t == "max" || t == "unlimited") return std::optional<uint64_t>();
  if (t.empty()) return Error(Err::kInvalidValue, "empty size");
  size_t pos = 0;
  while (pos < t.size() && (std::isdigit(static_cast<unsigned char>(t[pos])) || t[pos] == '.')) pos++;
  if (pos == 0) return Error(Err::kInvalidValue, "invalid size '{}': expected a number", Printable(t));
  std::string num = t.substr(0, pos);
  std::string unit = t.substr(pos);
  while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
  for (auto& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  long double mult = 1;
  if (unit.empty() || unit == "b") mult = 1;
  else if (unit == "k" || unit == "kb" || unit == "kib") mult = 1024.0L;
  else if (unit == "m" || unit == "mb" || unit == "mib") mult = 1024.0L * 1024;
  else if (unit == "g" || unit == "gb" || unit == "gib") mult = 1024.0L * 1024 * 1024;
  else if (unit == "t" || unit == "tb" || unit == "tib") mult = 1024.0L * 1024 * 1024 * 1024;
  else if (unit == "p" || unit == "pb" || unit == "pib") mult = 1024.0L * 1024 * 1024 * 1024 * 1024;
  else return Error(Err::kInvalidValue, "invalid size '{}': unknown unit '{}'", Printable(t), Printable(unit));
  if (std::count(num.begin(), num.end(), '.') > 1) return Error(Err::kInvalidValue, "invalid size '{}'", Printable(t));
  if (mult == 1 && num.find('.') != std::string::npos)
    return Error(Err::kInvalidValue, "invalid size '{}': fractional bytes", Printable(t));
  // Whole numbers exactly (a long double cannot hold every 64-bit integer on every target).
  if (num.find('.') == std::string::npos) {
    uint64_t v = 0;
    for (char c : num) {
      uint64_t digit = static_cast<uint64_t>(c - '0');
      if (v > (UINT64_MAX - digit) / 10) return Error(Err::kInvalidValue, "size '{}' is too large", Printable(t));
      v = v * 10 + digit;
    }
    auto m = static_cast<uint64_t>(mult);
    if (v > UINT64_MAX / m) return Error(Err::kInvalidValue, "size '{}' is too large", Printable(t));
    return std::optional<uint64_t>(v * m);
  }
  char* end = nullptr;
  long double v = std::strtold(num.c_str(), &end);
  if (end == nullptr || *end != '\0') return Error(Err::kInvalidValue, "invalid size '{}'", Printable(t));
  long double bytes = std::round(v * mult);
  // 2^64 itself does not fit; everything below it does (and converts exactly).
  if (!(bytes < 18446744073709551616.0L)) return Error(Err::kInvalidValue, "size '{}' is too large", Printable(t));
  return std::optional<uint64_t>(static_cast<uint64_t>(bytes));
}

std::string FormatSize(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    u++;
  }
  if (u == 0) return fmt::format("{} B", bytes);
  if (v == std::floor(v)) return fmt::format("{:.0f} {}", v, kUnits[u]);
  return fmt::format("{:.1f} {}", v, kUnits[u]);
}

Status ErrnoStatus(Err code, std::string_view what, int err) {
  return Status(code, fmt::format("{}: {}", what, std::strerror(err)));
}

uint64_t MonotonicNanos() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

std::string EscapeControl(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
    else out.push_back(ch);
  }
  return out;
}

}  // namespace remora
