// How session workers are started (docs/SECURITY.md, F7): as an unprivileged user of their
// own with no capabilities, no_new_privs, an environment of only what the CUDA driver and
// the worker need, and exactly the descriptors of their session. The worker confines
// itself further (worker/sandbox.h) before it reads anything from its client.
// Loop thread only.
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "remora/base/fd.h"
#include "remora/base/status.h"

namespace remora::server {

struct WorkerUser {
  std::string name;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;
  bool switch_user = false;  // false: workers keep the server's uid (it cannot switch)
};

// Whether this process may start workers as another user: it is root, or holds CAP_SETUID,
// CAP_SETGID, CAP_CHOWN, CAP_FOWNER, CAP_DAC_OVERRIDE and CAP_SETPCAP (remora-server.service
// runs as `remora` with these as ambient capabilities).
bool CanSwitchUsers();

// The user workers run as. A server that can switch users uses `requested` (default
// "remora-worker"; "nobody" with a warning if that user does not exist; "root" or its own
// user only when asked for by name, with a warning). A server that cannot switch: workers
// keep its uid (with a warning), and a `requested` user other than that is an error.
Result<WorkerUser> ResolveWorkerUser(const std::string& requested);

// The environment of workers: a fixed PATH and HOME, and from this process only variables
// the CUDA driver, the dynamic loader and the RDMA transport read (CUDA_*, NVIDIA_*,
// __GL_*, LD_LIBRARY_PATH, REMORA_RDMA_*, TZ) and where the worker finds NVIDIA's math
// libraries (REMORA_LIBRARY_PATH, server/worker/cuda_libraries.h).
std::vector<std::string> WorkerEnvironment();

class WorkerLauncher {
 public:
  // Opens the worker executable now (it is started through this descriptor, so its
  // directory need not be reachable by the worker user).
  // `stable_addresses`: workers start without address-space randomisation (their
  // drivers then reserve the same device address ranges, so a migrated session's addresses
  // are free in a new worker).
  static Result<WorkerLauncher> Create(const std::string& path, WorkerUser user, bool stable_addresses = false);
  // Starts a worker; `fds` as for Spawn (process.h).
  Result<pid_t> Launch(const std::vector<std::string>& args, const std::vector<std::pair<int, int>>& fds) const;
  const WorkerUser& user() const { return user_; }

 private:
  WorkerLauncher(std::string path, Fd exe, WorkerUser user, bool stable_addresses)
      : path_(std::move(path)), exe_(std::move(exe)), user_(std::move(user)), env_(WorkerEnvironment()),
        stable_addresses_(stable_addresses) {}
  std::string path_;
  Fd exe_;
  WorkerUser user_;
  std::vector<std::string> env_;
  bool stable_addresses_;
};

}  // namespace remora::server
