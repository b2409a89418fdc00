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
  std::optional<uint64_t> default_memory;  // --remora-mem when only --remora-gpus is given (unset: max_memory)
  // The administrator's caps on what a job may ask for (docs/SLURM.md, "Caps"): memory per
  // GPU, GPUs per node, and whether a job may have no memory limit at all (never with
  // max_memory; by default not either).
  std::optional<uint64_t> max_memory;
  std::optional<int> max_gpus;
  bool allow_unlimited = false;
};

Result<Config> ParseConfig(const std::string& text, const std::string& origin);
Result<Config> LoadConfig(const std::string& path);

// A job's memory limit per GPU: its --remora-mem (`requested`, already parsed: nullopt means
// it asked for `unlimited`), else default_memory, else max_memory, else unlimited.
std::optional<uint64_t> JobMemory(const Config& c, std::optional<std::optional<uint64_t>> requested);

// The caps applied to a job's request: kNotPermitted, saying which cap and what to ask for
// instead, when the job asks for more memory per GPU or more GPUs than the administrator
// allows, or for no memory limit where that is not allowed.
Status CheckJobRequest(const Config& c, std::optional<uint64_t> memory, int gpus);

}  // namespace remora::slurm
