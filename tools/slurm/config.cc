#include "config.h"

#include <fstream>
#include <sstream>

#include "remora/base/util.h"

namespace remora::slurm {
namespace {

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

}  // namespace

Result<Config> ParseConfig(const std::string& text, const std::string& origin) {
  Config c;
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); n++) {
    line = Trim(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    size_t eq = line.find('=');
    if (eq == std::string::npos) return Error(Err::kInvalidValue, "{}:{}: expected 'key = value'", origin, n);
    std::string key = Trim(line.substr(0, eq)), value = Trim(line.substr(eq + 1));
    if (key == "server") c.server = value;
    else if (key == "admin") c.admin = value;
    else if (key == "state_dir") c.state_dir = value;
    else if (key == "admin_token_file") c.admin_token_file = value;
    else if (key == "token_dir") c.token_dir = value;
    else if (key == "shim") c.shim = value;
    else if (key == "default_gpus") {
      char* end = nullptr;
      long v = std::strtol(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || v < 1 || v > 1024)
        return Error(Err::kInvalidValue, "{}:{}: default_gpus must be a number of GPUs, not '{}'", origin, n, value);
      c.default_gpus = static_cast<int>(v);
    } else if (key == "default_memory") {
      auto m = ParseSize(value);
      if (!m.ok()) return Error(Err::kInvalidValue, "{}:{}: default_memory: {}", origin, n, m.status().message());
      c.default_memory = *m;
    } else {
      return Error(Err::kInvalidValue, "{}:{}: unknown key '{}'", origin, n, key);
    }
  }
  if (c.admin.empty() == c.state_dir.empty())
    return Error(Err::kInvalidValue, "{}: give exactly one of 'admin' (tcp://HOST:PORT) and 'state_dir'", origin);
  if (c.token_dir.empty() || c.token_dir[0] != '/')
    return Error(Err::kInvalidValue, "{}: token_dir must be an absolute path", origin);
  return c;
}

Result<Config> LoadConfig(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Error(Err::kInitializationError, "cannot read {}", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseConfig(ss.str(), path);
}

}  // namespace remora::slurm
