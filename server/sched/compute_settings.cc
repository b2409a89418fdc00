#include "sched/compute_settings.h"

#include <cctype>
#include <charconv>

#include <fmt/format.h>

namespace remora::sched {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// A canonical unsigned decimal; nullopt for anything else (signs, blanks, overflow).
std::optional<uint64_t> Unsigned(std::string_view s) {
  if (s.empty() || s.size() > 19) return std::nullopt;
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

// "30", "12.5", "0.01" (at most two decimals) as hundredths of a percent: 3000, 1250, 1.
std::optional<uint64_t> PercentHundredths(std::string_view s) {
  size_t dot = s.find('.');
  std::string_view whole = s.substr(0, dot), frac = dot == std::string_view::npos ? "" : s.substr(dot + 1);
  if (dot != std::string_view::npos && (frac.empty() || frac.size() > 2)) return std::nullopt;
  auto w = Unsigned(whole);
  if (!w || *w > 100) return std::nullopt;
  uint64_t f = 0;
  if (!frac.empty()) {
    auto parsed = Unsigned(frac);
    if (!parsed) return std::nullopt;
    f = frac.size() == 1 ? *parsed * 10 : *parsed;
  }
  return *w * 100 + f;
}

std::string Percent(uint64_t hundredths) {
  if (hundredths % 100 == 0) return fmt::format("{}%", hundredths / 100);
  if (hundredths % 10 == 0) return fmt::format("{}.{}%", hundredths / 100, hundredths % 100 / 10);
  return fmt::format("{}.{:02}%", hundredths / 100, hundredths % 100);
}

}  // namespace

Result<std::optional<uint32_t>> ParseWeight(std::string_view text) {
  std::string_view s = Trim(text);
  if (s == "default" || s == "none") return std::optional<uint32_t>();
  std::optional<uint64_t> w;
  if (!s.empty() && s.back() == '%') w = PercentHundredths(s.substr(0, s.size() - 1));
  else w = Unsigned(s);
  if (!w || *w < kMinWeight || *w > kMaxWeight)
    return Error(Err::kInvalidValue,
                 "bad compute share '{}': expected a percent of the GPU like 30% or 12.5% (0.01%..100%), a weight "
                 "{}..{}, or default",
                 text, kMinWeight, kMaxWeight);
  return std::optional<uint32_t>(static_cast<uint32_t>(*w));
}

Result<std::optional<ComputeMax>> ParseMax(std::string_view text) {
  std::string_view s = Trim(text);
  auto bad = [&] {
    return Error(Err::kInvalidValue,
                 "bad compute.max '{}': expected 'QUOTA PERIOD' in microseconds (QUOTA <= PERIOD, PERIOD {}..{}), "
                 "'max [PERIOD]', or a percent like 30%",
                 text, kMinPeriodUs, kMaxPeriodUs);
  };
  if (!s.empty() && s.back() == '%') {
    auto h = PercentHundredths(s.substr(0, s.size() - 1));
    if (!h || *h == 0) return bad();
    if (*h >= 10000) return std::optional<ComputeMax>();
    return std::optional<ComputeMax>(ComputeMax{kDefaultPeriodUs * *h / 10000, kDefaultPeriodUs});
  }
  size_t blank = s.find_first_of(" \t");
  std::string_view first = s.substr(0, blank);
  std::string_view rest = blank == std::string_view::npos ? "" : Trim(s.substr(blank));
  uint64_t period = kDefaultPeriodUs;
  if (!rest.empty()) {
    auto p = Unsigned(rest);
    if (!p || *p < kMinPeriodUs || *p > kMaxPeriodUs) return bad();
    period = *p;
  }
  if (first == "max") return std::optional<ComputeMax>();
  auto quota = Unsigned(first);
  if (!quota || *quota == 0 || *quota > period) return bad();
  if (*quota == period) return std::optional<ComputeMax>();  // the whole GPU: no cap
  return std::optional<ComputeMax>(ComputeMax{*quota, period});
}

Result<Priority> ParsePriority(std::string_view text) {
  std::string_view s = Trim(text);
  if (s == "low") return Priority::kLow;
  if (s == "normal") return Priority::kNormal;
  if (s == "high") return Priority::kHigh;
  return Error(Err::kInvalidValue, "bad priority '{}': expected low, normal or high", text);
}

std::string FormatWeight(std::optional<uint32_t> weight) { return std::to_string(weight.value_or(kDefaultWeight)); }

std::string FormatShare(std::optional<uint32_t> weight) {
  if (!weight) return "default (1%)";
  return Percent(*weight);
}

std::string FormatMax(const std::optional<ComputeMax>& max) {
  if (!max) return fmt::format("max {}", kDefaultPeriodUs);
  return fmt::format("{} {}", max->quota_us, max->period_us);
}

std::string DescribeMax(const std::optional<ComputeMax>& max) {
  if (!max) return "none";
  uint64_t hundredths = max->quota_us * 10000 / max->period_us;
  std::string period = max->period_us % 1000 == 0 ? fmt::format("{} ms", max->period_us / 1000)
                                                  : fmt::format("{} us", max->period_us);
  return fmt::format("{} of {}", Percent(hundredths), period);
}

std::string_view PriorityName(Priority p) {
  switch (p) {
    case Priority::kLow: return "low";
    case Priority::kNormal: return "normal";
    case Priority::kHigh: return "high";
  }
  return "normal";
}

}  // namespace remora::sched
