#include "supervisor/worker_launcher.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <pwd.h>
#include <sys/syscall.h>
#include <unistd.h>

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

// The capabilities a server that is not root needs to give workers a user of their own:
// change uid and groups, hand the tenant's module cache directory to the worker's user and
// still trim it, drop the workers' bounding set (systemd: remora-server.service grants them).
constexpr int kSwitchCaps[] = {CAP_SETUID, CAP_SETGID, CAP_CHOWN, CAP_FOWNER, CAP_DAC_OVERRIDE, CAP_SETPCAP};

bool HasEffective(int cap) {
  struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct d[2] = {};
  if (::syscall(SYS_capget, &h, d) != 0) return false;
  return (d[cap / 32].effective >> (cap % 32)) & 1;
}

}  // namespace

bool CanSwitchUsers() {
  if (::geteuid() == 0) return true;
  for (int cap : kSwitchCaps)
    if (!HasEffective(cap)) return false;
  return true;
}

Result<WorkerUser> ResolveWorkerUser(const std::string& requested) {
  if (!CanSwitchUsers()) {
    WorkerUser u;
    u.uid = ::geteuid();
    u.gid = ::getegid();
    struct passwd* pw = ::getpwuid(u.uid);
    u.name = pw != nullptr ? pw->pw_name : std::to_string(u.uid);
    if (!requested.empty() && requested != u.name)
      return Error(Err::kInvalidValue, "--worker-user {}: this server runs as '{}' (not root) and cannot start "
                                       "processes as another user", requested, u.name);
    LOG_WARN("workers run as this server's user '{}' (uid {}): run the server as root, or with CAP_SETUID, CAP_SETGID, "
             "CAP_CHOWN, CAP_FOWNER, CAP_DAC_OVERRIDE and CAP_SETPCAP, to give them a user of their own "
             "(docs/SECURITY.md)", u.name, u.uid);
    return u;
  }
  std::string name = requested.empty() ? "remora-worker" : requested;
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
        v.starts_with("TZ=") ||
        // NCCL (issue 44): the operator's settings for the servers' NCCL (NCCL_SOCKET_IFNAME,
        // NCCL_IB_HCA, ...) and where its library is; never the client's.
        v.starts_with("NCCL_") || v.starts_with("REMORA_NCCL_PATH="))
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

}  // namespace remora::server
