#include "supervisor/process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "remora/base/fd.h"
#include "remora/base/util.h"

extern char** environ;

namespace remora::server {

Result<pid_t> Spawn(const std::string& path, const std::vector<std::string>& args,
                    const std::vector<std::pair<int, int>>& fds) {
  // Move every source out of the way of the targets first (dup2 in order could otherwise
  // overwrite a source that is also a target). The copies are close-on-exec.
  std::vector<Fd> high;
  for (auto& [from, to] : fds) {
    int h = ::fcntl(from, F_DUPFD_CLOEXEC, 100);
    if (h < 0) return ErrnoStatus(Err::kUnknown, "fcntl(F_DUPFD_CLOEXEC)", errno);
    high.emplace_back(h);
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  for (size_t i = 0; i < fds.size(); i++) posix_spawn_file_actions_adddup2(&fa, high[i].get(), fds[i].second);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);  // the supervisor blocks signals for signalfd
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(path.c_str()));
  for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, path.c_str(), &fa, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return Error(Err::kUnknown, "cannot start {}: {}", path, std::strerror(rc));
  return pid;
}

Result<std::string> RunAndCapture(const std::string& path, const std::vector<std::string>& args, int timeout_ms) {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) return ErrnoStatus(Err::kUnknown, "pipe", errno);
  Fd out_r(out[0]), out_w(out[1]), err_r(err[0]), err_w(err[1]);
  ASSIGN_OR_RETURN(pid_t pid, Spawn(path, args, {{out_w.get(), 1}, {err_w.get(), 2}}));
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
