#include "output.h"

#include <algorithm>
#include <ctime>

#include <fmt/format.h>

namespace remora::ctl {

Table::Table(std::vector<std::string> headers) {
  for (std::string& h : headers) {
    bool right = !h.empty() && h[0] == '>';
    right_.push_back(right);
    headers_.push_back(right ? h.substr(1) : h);
  }
}

void Table::Row(std::vector<std::string> cells) {
  cells.resize(headers_.size());
  rows_.push_back(std::move(cells));
}

std::string Table::Render() const {
  std::vector<size_t> width(headers_.size());
  for (size_t c = 0; c < headers_.size(); c++) {
    width[c] = headers_[c].size();
    for (const auto& r : rows_) width[c] = std::max(width[c], r[c].size());
  }
  std::string out;
  auto line = [&](const std::vector<std::string>& cells) {
    std::string l;
    for (size_t c = 0; c < cells.size(); c++) {
      if (c > 0) l += "  ";
      std::string pad(width[c] - cells[c].size(), ' ');
      l += right_[c] ? pad + cells[c] : cells[c] + (c + 1 < cells.size() ? pad : "");
    }
    while (!l.empty() && l.back() == ' ') l.pop_back();
    out += l + "\n";
  };
  line(headers_);
  for (const auto& r : rows_) line(r);
  return out;
}

void Json::Separate() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!first_.empty()) {
    if (!first_.back()) out_ += ",";
    first_.back() = false;
  }
}

Json& Json::BeginObject() {
  Separate();
  out_ += "{";
  first_.push_back(true);
  return *this;
}

Json& Json::EndObject() {
  out_ += "}";
  first_.pop_back();
  return *this;
}

Json& Json::BeginArray() {
  Separate();
  out_ += "[";
  first_.push_back(true);
  return *this;
}

Json& Json::EndArray() {
  out_ += "]";
  first_.pop_back();
  return *this;
}

Json& Json::Key(std::string_view k) {
  String(k);
  out_ += ":";
  after_key_ = true;
  return *this;
}

Json& Json::String(std::string_view v) {
  Separate();
  out_ += '"';
  for (char ch : v) {
    auto c = static_cast<unsigned char>(ch);
    if (c == '"') out_ += "\\\"";
    else if (c == '\\') out_ += "\\\\";
    else if (c == '\n') out_ += "\\n";
    else if (c == '\t') out_ += "\\t";
    else if (c < 0x20) out_ += fmt::format("\\u{:04x}", c);
    else out_ += ch;
  }
  out_ += '"';
  return *this;
}

Json& Json::Uint(uint64_t v) {
  Separate();
  out_ += std::to_string(v);
  return *this;
}

Json& Json::Int(int64_t v) {
  Separate();
  out_ += std::to_string(v);
  return *this;
}

Json& Json::Bool(bool v) {
  Separate();
  out_ += v ? "true" : "false";
  return *this;
}

Json& Json::Null() {
  Separate();
  out_ += "null";
  return *this;
}

std::string FormatTime(int64_t t) {
  if (t == 0) return "-";
  std::time_t tt = static_cast<std::time_t>(t);
  struct tm tm;
  localtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

std::string FormatAge(int64_t t) {
  int64_t s = std::max<int64_t>(0, static_cast<int64_t>(std::time(nullptr)) - t);
  if (s >= 86400) return fmt::format("{}d{:02}h", s / 86400, s % 86400 / 3600);
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, s % 3600 / 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

std::string JoinInts(const std::vector<int>& v) {
  if (v.empty()) return "-";
  std::string out;
  for (int x : v) out += (out.empty() ? "" : ",") + std::to_string(x);
  return out;
}

}  // namespace remora::ctl

namespace remora::ctl {

std::string FormatGpuTime(uint64_t ns) {
  if (ns == 0) return "0 s";
  if (ns < 1'000'000'000) return fmt::format("{} ms", (ns + 500'000) / 1'000'000);
  uint64_t s = ns / 1'000'000'000;
  if (s < 60) return fmt::format("{:.1f} s", static_cast<double>(ns) / 1e9);
  if (s < 3600) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}h{:02}m", s / 3600, s % 3600 / 60);
}

}  // namespace remora::ctl
