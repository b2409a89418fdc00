// How session workers are started (docs/SECURITY.md, F7 and N10): as an unprivileged user of
// their own with no capabilities, no_new_privs, an environment of only what the CUDA driver
// and the worker need, and exactly the descriptors of their session. The worker confines
// itself further (worker/loop/sandbox.h) before it reads anything from its client.
//
// Who changes the user: a server running as root does it itself, after fork. A server that
// is not root holds no privilege at all: it starts remora-worker-exec (server/worker_exec/,
// beside the worker, root:remora 0750, cap_setuid,cap_setgid=ep), which becomes
// `remora-worker` and executes the worker, and it ends workers through that helper too
// (they share no uid with it, so its own kill(2) is not permitted).
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
  // Not empty: the server is not root and switches through this remora-worker-exec.
  std::string helper;
};

inline constexpr char kDefaultWorkerUser[] = "remora-worker";  // also remora-worker-exec's

// Whether this process may start workers as another user by itself: it is root.
bool CanSwitchUsers();

// `path` is a remora-worker-exec that can switch users: a regular file of root with the
// setuid bit or file capabilities, which this process may execute.
bool HelperUsable(const std::string& path);

// The user workers run as. A root server uses `requested` (default "remora-worker";
// "nobody" with a warning if that user does not exist; "root" or its own user only when
// asked for by name, with a warning). A server that is not root uses the helper `helper`
// (remora-worker-exec beside the worker) if HelperUsable: workers then run as
// "remora-worker" (another `requested` user is an error), and the server must be in that
// user's group (it shares the tenants' module cache directories with the workers through
// it). Otherwise workers keep the server's uid (with a warning), and a `requested` user other
// than that is an error.
Result<WorkerUser> ResolveWorkerUser(const std::string& requested, const std::string& helper = "");

// The environment of workers: a fixed PATH and HOME, and from this process only variables
// the CUDA driver, the dynamic loader and the RDMA transport read (CUDA_*, NVIDIA_*,
// __GL_*, LD_LIBRARY_PATH, REMORA_RDMA_*, TZ) and where the worker finds NVIDIA's math
// libraries (REMORA_LIBRARY_PATH, server/worker/backend/cuda/cuda_libraries.h).
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
  // Sends `sig` to worker `pid`: kill(2), or through the helper. Blocks for the helper's run
  // (a few milliseconds). kInvalidValue if there is no such worker (any more).
  Status Signal(pid_t pid, int sig) const;
  const WorkerUser& user() const { return user_; }

 private:
  WorkerLauncher(std::string path, Fd exe, WorkerUser user, bool stable_addresses)
      : path_(std::move(path)), exe_(std::move(exe)), user_(std::move(user)), env_(WorkerEnvironment()),
        stable_addresses_(stable_addresses) {}
  Result<pid_t> LaunchThroughHelper(const std::vector<std::string>& args, const std::vector<std::pair<int, int>>& fds) const;
  std::string path_;
  Fd exe_;
  WorkerUser user_;
  std::vector<std::string> env_;
  bool stable_addresses_;
};

}  // namespace remora::server
