#include "supervisor/worker_launcher.h"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "remora/base/log.h"
#include "remora/base/util.h"
#include "supervisor/process.h"

extern char** environ;

namespace remora::server {
namespace {

Result<WorkerUser> LookUp(const std::string& name) {
  struct passwd pw, *res = nullptr;
  std::vector<char> buf(16384);
  if (getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(), &res) != 0 || res == nullptr)
    return Error(Err::kInvalidValue, "no user '{}' on this host", name);
  WorkerUser u;
  u.name = name;
  u.uid = pw.pw_uid;
  u.gid = pw.pw_gid;
  int n = 64;
  std::vector<gid_t> groups(static_cast<size_t>(n));
  if (getgrouplist(name.c_str(), pw.pw_gid, groups.data(), &n) < 0) {
    groups.resize(static_cast<size_t>(n));
    getgrouplist(name.c_str(), pw.pw_gid, groups.data(), &n);
  }
  groups.resize(static_cast<size_t>(std::max(n, 0)));
  u.groups = groups;
  return u;
}

}  // namespace

bool CanSwitchUsers() { return ::geteuid() == 0; }

bool HelperUsable(const std::string& path) {
  struct stat st;
  if (path.empty() || ::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != 0) return false;
  if (::access(path.c_str(), X_OK) != 0) return false;
  if (st.st_mode & S_ISUID) return true;
  return ::getxattr(path.c_str(), "security.capability", nullptr, 0) > 0;  // file capabilities
}

Result<WorkerUser> ResolveWorkerUser(const std::string& requested, const std::string& helper) {
  if (!CanSwitchUsers() && HelperUsable(helper)) {
    if (!requested.empty() && requested != kDefaultWorkerUser)
      return Error(Err::kInvalidValue, "--worker-user {}: this server is not root, and {} starts workers only as '{}'",
                   requested, helper, kDefaultWorkerUser);
    ASSIGN_OR_RETURN(WorkerUser u, LookUp(kDefaultWorkerUser));
    if (u.uid == 0 || u.uid == ::geteuid())
      return Error(Err::kInvalidValue, "user '{}' is root or this server's own user: no separation", u.name);
    // The tenants' module cache directories stay the server's, shared with the workers
    // through their group (ModuleStore::TenantDir): the server must be in it.
    std::vector<gid_t> mine(static_cast<size_t>(std::max(::getgroups(0, nullptr), 0)));
    int n = ::getgroups(static_cast<int>(mine.size()), mine.data());
    mine.resize(static_cast<size_t>(std::max(n, 0)));
    if (::getegid() != u.gid && std::find(mine.begin(), mine.end(), u.gid) == mine.end())
      return Error(Err::kInitializationError,
                   "this server (uid {}) is not in group '{}' (gid {}), through which it shares the tenants' module "
                   "caches with the workers: add it (remora-server.service: SupplementaryGroups={})",
                   ::geteuid(), u.name, u.gid, u.name);
    u.switch_user = true;
    u.helper = helper;
    LOG_INFO("workers run as user '{}' (uid {}), without capabilities, started through {}", u.name, u.uid, helper);
    return u;
  }
  if (!CanSwitchUsers()) {
    WorkerUser u;
    u.uid = ::geteuid();
    u.gid = ::getegid();
    struct passwd* pw = ::getpwuid(u.uid);
    u.name = pw != nullptr ? pw->pw_name : std::to_string(u.uid);
    if (!requested.empty() && requested != u.name)
      return Error(Err::kInvalidValue, "--worker-user {}: this server runs as '{}' (not root) and cannot start "
                                       "processes as another user", requested, u.name);
    struct group* gr = ::getgrgid(u.gid);
    LOG_WARN("workers run as this server's user '{}' (uid {}): run the server as root, or install {} "
             "(root:{}, mode 0750, setcap cap_setuid,cap_setgid=ep), to give them a user of their own "
             "(docs/SECURITY.md)", u.name, u.uid, helper.empty() ? "remora-worker-exec beside remora-worker" : helper,
             gr != nullptr ? gr->gr_name : std::to_string(u.gid));
    return u;
  }
  std::string name = requested.empty() ? kDefaultWorkerUser : requested;
  auto u = LookUp(name);
  if (!u.ok() && requested.empty()) {
    LOG_WARN("no user 'remora-worker' (tools/install-deps.sh creates it): workers run as 'nobody' instead");
    u = LookUp("nobody");
  }
  if (!u.ok()) return u.status();
  if (u->uid == ::geteuid()) {
    LOG_WARN("--worker-user {}: workers run as this server's own user, without privilege separation", name);
    return u;
  }
  if (u->uid == 0) LOG_WARN("--worker-user {}: workers run as root, without privilege separation", name);
  u->switch_user = u->uid != 0;
  if (u->switch_user) LOG_INFO("workers run as user '{}' (uid {}), without capabilities", u->name, u->uid);
  return u;
}

std::vector<std::string> WorkerEnvironment() {
  std::vector<std::string> env = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/"};
  for (char** e = environ; *e != nullptr; e++) {
    std::string_view v(*e);
    if (v.starts_with("CUDA_") || v.starts_with("NVIDIA_") || v.starts_with("__GL_") ||
        v.starts_with("LD_LIBRARY_PATH=") || v.starts_with("REMORA_LIBRARY_PATH=") || v.starts_with("REMORA_RDMA_") ||
        v.starts_with("REMORA_WORKER_PROFILE=") || v.starts_with("REMORA_WORKER_STALL_WARN_S=") ||
        v.starts_with("TZ=") ||
        // NCCL (issue 44): the operator's settings for the servers' NCCL (NCCL_SOCKET_IFNAME,
        // NCCL_IB_HCA, ...) and where its library is; never the client's.
        v.starts_with("NCCL_") || v.starts_with("REMORA_NCCL_PATH=") ||
        // CUPTI for the sessions' profilers (docs/ARCHITECTURE.md, "Profiling (CUPTI)").
        v.starts_with("REMORA_CUPTI_PATH="))
      env.emplace_back(v);
  }
  return env;
}

Result<WorkerLauncher> WorkerLauncher::Create(const std::string& path, WorkerUser user, bool stable_addresses) {
  Fd exe(::open(path.c_str(), O_PATH | O_CLOEXEC));
  if (!exe) return ErrnoStatus(Err::kInitializationError, "open the worker executable " + path, errno);
  return WorkerLauncher(path, std::move(exe), std::move(user), stable_addresses);
}

Result<pid_t> WorkerLauncher::Launch(const std::vector<std::string>& args,
                                     const std::vector<std::pair<int, int>>& fds) const {
  if (!user_.helper.empty()) return LaunchThroughHelper(args, fds);
  SpawnOptions o;
  o.env = &env_;
  o.exec_fd = exe_.get();
  o.drop_capabilities = true;
  o.no_address_randomisation = stable_addresses_;
  if (user_.switch_user) {
    o.switch_user = true;
    o.uid = user_.uid;
    o.gid = user_.gid;
    o.groups = user_.groups;
  }
  return Spawn(path_, args, fds, o);
}

// The helper keeps every descriptor Spawn laid out and executes the worker beside it; the
// environment travels as arguments (the loader empties a privileged program's of variables
// such as LD_LIBRARY_PATH). No no_new_privs here: it would void the helper's capabilities;
// the helper sets it before it executes the worker.
Result<pid_t> WorkerLauncher::LaunchThroughHelper(const std::vector<std::string>& args,
                                                  const std::vector<std::pair<int, int>>& fds) const {
  std::vector<std::string> a = {"exec"};
  if (stable_addresses_) a.push_back("--stable-addresses");
  for (const std::string& e : env_) {
    a.push_back("--env");
    a.push_back(e);
  }
  a.push_back("--");
  a.insert(a.end(), args.begin(), args.end());
  static const std::vector<std::string> kNoEnvironment;
  SpawnOptions o;
  o.env = &kNoEnvironment;
  o.no_new_privs = false;
  return Spawn(user_.helper, a, fds, o);
}

Status WorkerLauncher::Signal(pid_t pid, int sig) const {
  if (pid <= 1) return Error(Err::kInvalidValue, "no worker {}", pid);
  if (user_.helper.empty()) {
    if (::kill(pid, sig) == 0) return Status::Ok();
    if (errno == ESRCH) return Error(Err::kInvalidValue, "no worker {}", pid);
    return ErrnoStatus(Err::kNotPermitted, fmt::format("signal {} to worker {}", sig, pid), errno);
  }
  static const std::vector<std::string> kNoEnvironment;
  SpawnOptions o;
  o.env = &kNoEnvironment;
  o.no_new_privs = false;
  auto r = RunAndCapture(user_.helper, {"signal", std::to_string(pid), std::to_string(sig)}, 5000, o);
  if (r.ok()) return Status::Ok();
  return Error(Err::kNotPermitted, "signal {} to worker {} through {}: {}", sig, pid, user_.helper, r.status().message());
}

}  // namespace remora::server
