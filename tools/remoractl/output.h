// remoractl's output: aligned text tables for people, JSON for scripts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace remora::ctl {

// A table printed with columns padded to their widest cell (two spaces apart). Columns whose
// header starts with '>' are right-aligned (the '>' is not printed).
class Table {
 public:
  explicit Table(std::vector<std::string> headers);
  void Row(std::vector<std::string> cells);
  std::string Render() const;
  bool empty() const { return rows_.empty(); }

 private:
  std::vector<std::string> headers_;
  std::vector<bool> right_;
  std::vector<std::vector<std::string>> rows_;
};

// Streaming JSON writer: Begin/End of objects and arrays, Key before each member's value.
// Commas and escaping are handled here; the caller keeps the nesting right.
class Json {
 public:
  Json& BeginObject();
  Json& EndObject();
  Json& BeginArray();
  Json& EndArray();
  Json& Key(std::string_view k);
  Json& String(std::string_view v);
  Json& Uint(uint64_t v);
  Json& Int(int64_t v);
  Json& Bool(bool v);
  Json& Null();
  Json& OptUint(const std::optional<uint64_t>& v) { return v ? Uint(*v) : Null(); }
  // The document, newline-terminated.
  std::string str() const { return out_ + "\n"; }

 private:
  void Separate();
  std::string out_;
  std::vector<bool> first_;  // per open container: no member written yet
  bool after_key_ = false;
};

// "2024-05-01 12:00:00" (local time) for unix seconds; "-" for 0.
std::string FormatTime(int64_t unix_seconds);
// "1h02m", "3m05s", "12s" since unix_seconds.
std::string FormatAge(int64_t unix_seconds);
// "0,1" or "-".
std::string JoinInts(const std::vector<int>& v);
// GPU time: "0 s", "340 ms", "12.5 s", "3m05s", "1h02m".
std::string FormatGpuTime(uint64_t ns);

}  // namespace remora::ctl
