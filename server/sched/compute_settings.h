// A tenant's compute settings and their text forms, named after cgroup v2's CPU control:
//
//   weight    compute.weight: 1..10000, relative to the other busy tenants of a GPU; 100 when
//             unset (cgroup's default). `remoractl tenant set NAME --compute 30%` writes 3000:
//             a percent is a weight in hundredths of the GPU, so shares that add up to 100%
//             are literal, and a tenant without one (100, i.e. 1%) is best effort beside them.
//   max       compute.max: "QUOTA PERIOD" in microseconds ("30000 100000": 30% of each GPU),
//             or "max" (no cap). A cap is a hard limit: the GPU idles rather than exceed it.
//   priority  low | normal | high. Busy tenants of a higher class are served first while they
//             are within their share.
//
// Pure code, no I/O: the supervisor, remoractl and remorafs parse and print with it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "remora/base/status.h"

namespace remora::sched {

inline constexpr uint32_t kMinWeight = 1;
inline constexpr uint32_t kDefaultWeight = 100;
inline constexpr uint32_t kMaxWeight = 10000;
inline constexpr uint64_t kDefaultPeriodUs = 100000;  // cgroup's default period
inline constexpr uint64_t kMinPeriodUs = 1000;
inline constexpr uint64_t kMaxPeriodUs = 1000000;

enum class Priority : uint8_t { kLow = 0, kNormal = 1, kHigh = 2 };
inline constexpr int kNumPriorities = 3;

struct ComputeMax {
  uint64_t quota_us = 0;   // GPU time allowed per period, 1..period
  uint64_t period_us = kDefaultPeriodUs;
  bool operator==(const ComputeMax&) const = default;
};

struct ComputeSettings {
  std::optional<uint32_t> weight;   // nullopt: unset (kDefaultWeight)
  std::optional<ComputeMax> max;    // nullopt: no cap
  Priority priority = Priority::kNormal;

  // Nothing set: such a tenant alone does not turn enforcement on for a GPU.
  bool empty() const { return !weight && !max && priority == Priority::kNormal; }
  uint32_t effective_weight() const { return weight.value_or(kDefaultWeight); }
  bool operator==(const ComputeSettings&) const = default;
};

// "30%" (3000), "12.5%" (1250), "250" (a raw weight), "default" (nullopt). kInvalidValue with a
// message that says what is accepted.
Result<std::optional<uint32_t>> ParseWeight(std::string_view text);
// "max" / "max 50000" (nullopt), "30000 100000", "30%" (of the default period).
Result<std::optional<ComputeMax>> ParseMax(std::string_view text);
Result<Priority> ParsePriority(std::string_view text);

// compute.weight's contents: the weight, or 100 when unset.
std::string FormatWeight(std::optional<uint32_t> weight);
// "30%" for 3000 (two decimals at most: "12.5%"), "default (1%)" when unset.
std::string FormatShare(std::optional<uint32_t> weight);
// compute.max's contents: "30000 100000" or "max 100000".
std::string FormatMax(const std::optional<ComputeMax>& max);
// "30% of 100 ms" or "none".
std::string DescribeMax(const std::optional<ComputeMax>& max);
std::string_view PriorityName(Priority p);

}  // namespace remora::sched
