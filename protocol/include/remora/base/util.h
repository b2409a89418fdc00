// Small helpers shared by every module: sizes, errno text, monotonic time.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "remora/base/status.h"

namespace remora {

// Parses "4096", "512MiB", "8GiB", "1.5G", "64k", "max" (-> nullopt meaning unlimited).
// Decimal suffixes (K, M, G, T, P, with or without B) are binary multiples too, as in
// cgroups. Whole numbers are exact up to 2^64 - 1; what FormatSize prints parses back.
Result<std::optional<uint64_t>> ParseSize(std::string_view text);
// 1536 -> "1.5 KiB"
std::string FormatSize(uint64_t bytes);

// Text from outside (a peer, a user, a file) made fit for one line of a log or an error
// message: control characters, quotes' backslash and bytes outside printable ASCII become
// \xNN escapes, and anything past `max` bytes is cut off with "...".
std::string Printable(std::string_view text, size_t max = 128);

// strerror(errno) with the call name: "connect(/tmp/x.sock): No such file or directory".
Status ErrnoStatus(Err code, std::string_view what, int err);

uint64_t MonotonicNanos();

// The same escaping without a length limit, for whole log lines (keeps UTF-8 sequences).
std::string EscapeControl(std::string_view s);

inline uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

}  // namespace remora
