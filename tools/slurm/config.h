// The Remora side of a Slurm cluster: /etc/remora/slurm.conf, read by the remora-slurm helper
// and by the SPANK plugin (spank_remora.c parses the same format). One "key = value" per
// line; '#' starts a comment; unknown keys are errors (a typo must not pass silently).
#pragma once

#include <optional>
#include <string>

#include "remora/base/status.h"

namespace remora::slurm {

inline constexpr char kDefaultConfigPath[] = "/etc/remora/slurm.conf";

struct Config {
  std::string server;            // REMORA_SERVER of the jobs, e.g. tcp://gpu1:7070
  std::string admin;             // the server's admin URL (tcp://HOST:PORT), or...
  std::string state_dir;         // ...its state directory, when it runs on this host
  std::string admin_token_file;  // with a tcp:// admin URL
  std::string token_dir = "/run/remora-slurm";  // where job token files are written
  std::string shim;              // LD_PRELOADed into the jobs (the plugin uses it)
  int default_gpus = 1;          // --remora-gpus when only --remora-mem is given
  std::optional<uint64_t> default_memory;  // --remora-mem when only --remora-gpus is given (unset: unlimited)
};

Result<Config> ParseConfig(const std::string& text, const std::string& origin);
Result<Config> LoadConfig(const std::string& path);

}  // namespace remora::slurm
