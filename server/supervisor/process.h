// Spawning child processes with an exact descriptor layout. Private to the supervisor.
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "remora/base/status.h"

namespace remora::server {

// Starts `path` with `args` (argv[1..]) and the environment of this process. Each pair
// (from, to) in `fds` makes the child's descriptor `to` a copy of this process's `from`;
// every other descriptor is closed in the child (all of ours are close-on-exec).
Result<pid_t> Spawn(const std::string& path, const std::vector<std::string>& args,
                    const std::vector<std::pair<int, int>>& fds);

// Runs `path args` to completion and returns its standard output; a non-zero exit is an
// error carrying its standard error. Gives up after timeout_ms.
Result<std::string> RunAndCapture(const std::string& path, const std::vector<std::string>& args, int timeout_ms);

// Directory of this executable (for finding remora-worker next to remora-server).
std::string SelfDirectory();
// The worker binary: remora-worker beside this program (a build tree), else
// ../libexec/remora/remora-worker relative to it (an installed tree: /usr/bin and /usr/libexec).
std::string DefaultWorkerPath();

}  // namespace remora::server
