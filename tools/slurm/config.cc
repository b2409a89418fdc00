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
    } else if (key == "default_memory" || key == "max_memory") {
      auto m = ParseSize(value);
      if (!m.ok()) return Error(Err::kInvalidValue, "{}:{}: {}: {}", origin, n, key, m.status().message());
      if (!m->has_value())
        return Error(Err::kInvalidValue, "{}:{}: {} must be a size (leave it out for none; allow_unlimited = yes lets "
                                         "jobs ask for no limit)", origin, n, key);
      (key == "default_memory" ? c.default_memory : c.max_memory) = **m;
    } else if (key == "max_gpus") {
      char* end = nullptr;
      long v = std::strtol(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || v < 1 || v > 1024)
        return Error(Err::kInvalidValue, "{}:{}: max_gpus must be a number of GPUs, not '{}'", origin, n, value);
      c.max_gpus = static_cast<int>(v);
    } else if (key == "allow_unlimited") {
      if (value == "yes" || value == "true" || value == "1") c.allow_unlimited = true;
      else if (value == "no" || value == "false" || value == "0") c.allow_unlimited = false;
      else return Error(Err::kInvalidValue, "{}:{}: allow_unlimited must be yes or no, not '{}'", origin, n, value);
    } else {
      return Error(Err::kInvalidValue, "{}:{}: unknown key '{}'", origin, n, key);
    }
  }
  if (c.admin.empty() == c.state_dir.empty())
    return Error(Err::kInvalidValue, "{}: give exactly one of 'admin' (tcp://HOST:PORT) and 'state_dir'", origin);
  if (c.token_dir.empty() || c.token_dir[0] != '/')
    return Error(Err::kInvalidValue, "{}: token_dir must be an absolute path", origin);
  if (c.max_memory && c.default_memory && *c.default_memory > *c.max_memory)
    return Error(Err::kInvalidValue, "{}: default_memory ({}) is more than max_memory ({})", origin,
                 FormatSize(*c.default_memory), FormatSize(*c.max_memory));
  if (c.max_gpus && c.default_gpus > *c.max_gpus)
    return Error(Err::kInvalidValue, "{}: default_gpus ({}) is more than max_gpus ({})", origin, c.default_gpus,
                 *c.max_gpus);
  if (c.max_memory && c.allow_unlimited)
    return Error(Err::kInvalidValue, "{}: allow_unlimited = yes contradicts max_memory", origin);
  return c;
}

std::optional<uint64_t> JobMemory(const Config& c, std::optional<std::optional<uint64_t>> requested) {
  if (requested) return *requested;
  if (c.default_memory) return c.default_memory;
  return c.max_memory;
}

Status CheckJobRequest(const Config& c, std::optional<uint64_t> memory, int gpus) {
  if (c.max_gpus && gpus > *c.max_gpus)
    return Error(Err::kNotPermitted, "{} Remora GPUs asked for; this cluster allows at most {} per job and node "
                                     "(max_gpus)", gpus, *c.max_gpus);
  if (!memory) {
    if (c.max_memory)
      return Error(Err::kNotPermitted, "no memory limit asked for; this cluster allows at most {} per GPU (max_memory): "
                                       "give --remora-mem=SIZE", FormatSize(*c.max_memory));
    if (!c.allow_unlimited)
      return Error(Err::kNotPermitted, "no memory limit asked for, which this cluster does not allow "
                                       "(allow_unlimited = no): give --remora-mem=SIZE");
    return Status::Ok();
  }
  if (c.max_memory && *memory > *c.max_memory)
    return Error(Err::kNotPermitted, "{} per GPU asked for; this cluster allows at most {} (max_memory)",
                 FormatSize(*memory), FormatSize(*c.max_memory));
  return Status::Ok();
}

Result<Config> LoadConfig(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Error(Err::kInitializationError, "cannot read {}", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseConfig(ss.str(), path);
}

}  // namespace remora::slurm
