// Spawning child processes with an exact descriptor layout. Private to the supervisor.
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "remora/base/status.h"

namespace remora::server {

struct SpawnOptions {
  const std::vector<std::string>* env = nullptr;  // "NAME=VALUE" entries; null: this process's
  int exec_fd = -1;                 // start the executable through this descriptor (execveat)
  bool drop_capabilities = false;   // empty bounding and ambient sets, then no capabilities
  bool switch_user = false;         // run as uid/gid with these supplementary groups
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;
  bool no_address_randomisation = false;  // personality(ADDR_NO_RANDOMIZE) for the executable
  // no_new_privs before the exec. Off only to start remora-worker-exec, whose file
  // capabilities (or setuid bit) it would void; that helper sets it itself.
  bool no_new_privs = true;
};

// Starts `path` with `args` (argv[1..]). Each pair (from, to) in `fds` makes the child's
// descriptor `to` a copy of this process's `from`; every other descriptor but 0, 1 and 2 is
// closed in the child, whatever its close-on-exec flag. The child gets no_new_privs (unless
// options say otherwise), and default signal dispositions and mask. A child that cannot take
// on its user exits 126.
Result<pid_t> Spawn(const std::string& path, const std::vector<std::string>& args,
                    const std::vector<std::pair<int, int>>& fds, const SpawnOptions& options = {});

// Runs `path args` to completion and returns its standard output; a non-zero exit is an
// error carrying its standard error. Gives up after timeout_ms.
Result<std::string> RunAndCapture(const std::string& path, const std::vector<std::string>& args, int timeout_ms,
                                  const SpawnOptions& options = {});

// Directory of this executable (for finding remora-worker next to remora-server).
std::string SelfDirectory();
// The worker binary: remora-worker beside this program (a build tree), else
// ../libexec/remora/remora-worker relative to it (an installed tree: /usr/bin and /usr/libexec).
std::string DefaultWorkerPath();

}  // namespace remora::server
