#include "visible_devices.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <strings.h>

namespace remora::shim {
namespace {

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    size_t comma = s.find(',', start);
    out.push_back(s.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

std::string Trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) b++;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) e--;
  return s.substr(b, e - b);
}

// strtoul's reading of an index: an optional sign and the digits that follow; -1 when there
// are none or the value is negative (or absurdly large).
long Index(const std::string& s) {
  size_t i = 0;
  bool negative = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
  size_t digits = i;
  long v = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])) && v < (1L << 30)) v = v * 10 + (s[i++] - '0');
  if (i == digits || negative) return -1;
  return v;
}

// The device whose UUID `prefix` begins (case-insensitively), or -1 for none or several.
int ByUuid(const std::string& prefix, const std::vector<std::string>& uuids) {
  int found = -1;
  for (size_t d = 0; d < uuids.size(); d++) {
    if (uuids[d].size() < prefix.size() || strncasecmp(uuids[d].c_str(), prefix.c_str(), prefix.size()) != 0) continue;
    if (found >= 0) return -1;  // ambiguous
    found = static_cast<int>(d);
  }
  return found;
}

}  // namespace

std::vector<int> VisibleDevices(const std::string& value, const std::vector<std::string>& uuids, bool* named_twice) {
  bool ignored = false;
  bool& twice = named_twice != nullptr ? *named_twice : ignored;
  twice = false;
  std::string v = Trim(value);
  if (v.empty()) return {};
  std::vector<int> visible;
  // A UUID entry: "GPU-" or "MIG-" and hex; the driver matches the UUID whatever the prefix
  // (measured: "MIG-" and a GPU's UUID names that GPU), and a session has no MIG instances.
  auto uuid_entry = [](const std::string& e) { return e.rfind("GPU-", 0) == 0 || e.rfind("MIG-", 0) == 0; };
  if (uuid_entry(v)) {
    std::vector<std::string> named;
    for (const std::string& raw : Split(v)) {
      std::string entry = Trim(raw);
      if (!uuid_entry(entry)) break;
      entry.replace(0, 4, "GPU-");
      if (std::find(named.begin(), named.end(), entry) != named.end()) return twice = true, std::vector<int>{};
      named.push_back(entry);
    }
    for (const std::string& prefix : named) {
      int device = ByUuid(prefix, uuids);
      if (device < 0) break;
      if (std::find(visible.begin(), visible.end(), device) != visible.end()) return twice = true, std::vector<int>{};
      visible.push_back(device);
    }
    return visible;
  }
  std::vector<long> named;
  for (const std::string& raw : Split(v)) {
    long i = Index(Trim(raw));
    if (i >= 0 && std::find(named.begin(), named.end(), i) != named.end()) return twice = true, std::vector<int>{};
    if (i < 0) break;
    named.push_back(i);
  }
  for (long i : named) {
    if (static_cast<size_t>(i) >= uuids.size()) break;
    visible.push_back(static_cast<int>(i));
  }
  return visible;
}

std::string UuidText(const unsigned char u[16]) {
  char s[48];
  std::snprintf(s, sizeof(s), "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2],
                u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
  return s;
}

}  // namespace remora::shim
