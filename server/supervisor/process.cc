#include "supervisor/process.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "remora/base/fd.h"
#include "remora/base/util.h"

extern char** environ;

namespace remora::server {

namespace {

int LastCapability() {
  int last = 40;
  if (FILE* f = std::fopen("/proc/sys/kernel/cap_last_cap", "r")) {
    if (std::fscanf(f, "%d", &last) != 1) last = 40;
    std::fclose(f);
  }
  return last;
}

// In the child between fork and exec: async-signal-safe calls only.
[[noreturn]] void ChildFail(const char* what) {
  const char* e = std::strerror(errno);
  const char prefix[] = "remora-server: cannot start a worker: ";
  (void)!::write(2, prefix, sizeof(prefix) - 1);
  (void)!::write(2, what, std::strlen(what));
  (void)!::write(2, ": ", 2);
  (void)!::write(2, e, std::strlen(e));
  (void)!::write(2, "\n", 1);
  ::_exit(126);
}

}  // namespace

Result<pid_t> Spawn(const std::string& path, const std::vector<std::string>& args,
                    const std::vector<std::pair<int, int>>& fds, const SpawnOptions& o) {
  // Move every source out of the way of the targets first (dup2 in order could otherwise
  // overwrite a source that is also a target). The copies are close-on-exec.
  std::vector<Fd> high;
  int max_target = 2;
  for (auto& [from, to] : fds) {
    int h = ::fcntl(from, F_DUPFD_CLOEXEC, 100);
    if (h < 0) return ErrnoStatus(Err::kUnknown, "fcntl(F_DUPFD_CLOEXEC)", errno);
    high.emplace_back(h);
    max_target = std::max(max_target, to);
  }
  // Everything the child needs is prepared here: after fork it may not allocate.
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(path.c_str()));
  for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  if (o.env != nullptr) {
    for (auto& e : *o.env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
  }
  char* const* envv = o.env != nullptr ? envp.data() : environ;
  std::vector<bool> is_target(static_cast<size_t>(max_target) + 1, false);
  for (auto& [from, to] : fds) is_target[static_cast<size_t>(to)] = true;
  int last_cap = o.drop_capabilities ? LastCapability() : 0;
  int exec_at = max_target + 1;
  // The executable's descriptor may itself sit on a target number: keep a copy out of the way.
  Fd exec_high;
  if (o.exec_fd >= 0) {
    exec_high.reset(::fcntl(o.exec_fd, F_DUPFD_CLOEXEC, 100));
    if (!exec_high) return ErrnoStatus(Err::kUnknown, "fcntl(F_DUPFD_CLOEXEC)", errno);
  }

  pid_t pid = ::fork();
  if (pid < 0) return ErrnoStatus(Err::kUnknown, "fork", errno);
  if (pid == 0) {
    sigset_t none;
    sigemptyset(&none);
    struct sigaction dfl = {};
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; sig++) ::sigaction(sig, &dfl, nullptr);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);  // the supervisor blocks signals for signalfd
    for (size_t i = 0; i < fds.size(); i++)
      if (::dup2(high[i].get(), fds[i].second) < 0) ChildFail("dup2");
    if (o.exec_fd >= 0 && ::dup3(exec_high.get(), exec_at, O_CLOEXEC) < 0) ChildFail("dup3");
    for (int fd = 3; fd <= max_target; fd++)
      if (!is_target[static_cast<size_t>(fd)]) ::close(fd);
    int keep = o.exec_fd >= 0 ? exec_at : max_target;
    if (::syscall(SYS_close_range, keep + 1, ~0U, 0) != 0)
      for (int fd = keep + 1; fd < 65536; fd++) ::close(fd);
    if (o.drop_capabilities) {
      for (int cap = 0; cap <= last_cap; cap++) (void)::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0);
      (void)::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    }
    if (o.switch_user) {
      if (::setgroups(o.groups.size(), o.groups.data()) != 0) ChildFail("setgroups");
      if (::setresgid(o.gid, o.gid, o.gid) != 0) ChildFail("setresgid");
      if (::setresuid(o.uid, o.uid, o.uid) != 0) ChildFail("setresuid");
    }
    if (o.drop_capabilities) {
      struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
      struct __user_cap_data_struct d[2] = {};
      if (::syscall(SYS_capset, &h, d) != 0) ChildFail("capset");
    }
    // Best effort: a container's seccomp profile may refuse it (a later move then fails cleanly).
    if (o.no_address_randomisation) (void)::personality(ADDR_NO_RANDOMIZE);
    if (o.no_new_privs && ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) ChildFail("prctl(PR_SET_NO_NEW_PRIVS)");
    if (o.exec_fd >= 0) ::syscall(SYS_execveat, exec_at, "", argv.data(), envv, AT_EMPTY_PATH);
    else ::execve(path.c_str(), argv.data(), envv);
    ChildFail(path.c_str());
  }
  return pid;
}

Result<std::string> RunAndCapture(const std::string& path, const std::vector<std::string>& args, int timeout_ms,
                                  const SpawnOptions& options) {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) return ErrnoStatus(Err::kUnknown, "pipe", errno);
  Fd out_r(out[0]), out_w(out[1]), err_r(err[0]), err_w(err[1]);
  ASSIGN_OR_RETURN(pid_t pid, Spawn(path, args, {{out_w.get(), 1}, {err_w.get(), 2}}, options));
  out_w.reset();
  err_w.reset();
  std::string stdout_text, stderr_text;
  uint64_t deadline = MonotonicNanos() + uint64_t(timeout_ms) * 1000000;
  struct pollfd p[2] = {{out_r.get(), POLLIN, 0}, {err_r.get(), POLLIN, 0}};
  int open = 2;
  while (open > 0) {
    uint64_t now = MonotonicNanos();
    if (now >= deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      return Error(Err::kTimeout, "{} did not finish within {} ms", path, timeout_ms);
    }
    if (::poll(p, 2, static_cast<int>((deadline - now) / 1000000) + 1) < 0 && errno != EINTR)
      return ErrnoStatus(Err::kUnknown, "poll", errno);
    for (int i = 0; i < 2; i++) {
      if (p[i].fd < 0 || !(p[i].revents & (POLLIN | POLLHUP))) continue;
      char buf[4096];
      ssize_t n = ::read(p[i].fd, buf, sizeof(buf));
      if (n > 0) (i == 0 ? stdout_text : stderr_text).append(buf, static_cast<size_t>(n));
      else {
        p[i].fd = -1;
        open--;
      }
    }
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    while (!stderr_text.empty() && stderr_text.back() == '\n') stderr_text.pop_back();
    return Error(Err::kInitializationError, "{}", stderr_text.empty() ? path + " failed" : stderr_text);
  }
  return stdout_text;
}

std::string SelfDirectory() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  std::string p(buf, static_cast<size_t>(n));
  return p.substr(0, p.rfind('/'));
}

std::string DefaultWorkerPath() {
  std::string dir = SelfDirectory();
  std::string beside = dir + "/remora-worker";
  if (::access(beside.c_str(), X_OK) == 0) return beside;
  std::string installed = dir + "/../libexec/remora/remora-worker";
  return ::access(installed.c_str(), X_OK) == 0 ? installed : beside;
}

}  // namespace remora::server
