// Child processes and the remora-server lifecycle (see process.hpp for the contract).
#include "process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "results.hpp"

extern char** environ;

namespace remora::bench {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

std::string ExitStatus::describe() const {
  if (timed_out) return "timed out (killed)";
  if (exited) return "exit status " + std::to_string(code);
  if (signal > 0) {
    const char* abbrev = sigabbrev_np(signal);
    return std::string("killed by SIG") + (abbrev ? abbrev : std::to_string(signal).c_str());
  }
  return "status unknown";
}

namespace {

ExitStatus from_wait_status(int status) {
  ExitStatus s;
  if (WIFEXITED(status)) {
    s.exited = true;
    s.code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    s.signal = WTERMSIG(status);
  }
  return s;
}

}  // namespace

pid_t spawn(const SpawnSpec& spec) {
  if (spec.argv.empty()) throw std::runtime_error("spawn: empty argv");
  // Everything the child needs is built before fork(): the child only calls
  // async-signal-safe functions.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    std::string_view entry(*e);
    std::string_view name = entry.substr(0, entry.find('='));
    bool edited = std::any_of(spec.env.begin(), spec.env.end(),
                              [&](const auto& kv) { return kv.first == name; });
    if (!edited) env_strings.emplace_back(entry);
  }
  for (const auto& [name, value] : spec.env) {
    if (value) env_strings.push_back(name + "=" + *value);
  }
  std::vector<char*> argv, envp;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);

  const char* log = spec.log_path.empty() ? "/dev/null" : spec.log_path.c_str();
  int log_fd = ::open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0)
    throw std::runtime_error(std::string("cannot open ") + log + ": " + std::strerror(errno));
  int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  int pipe_fd[2];
  if (null_fd < 0 || ::pipe2(pipe_fd, O_CLOEXEC) != 0) {
    int err = errno;
    ::close(log_fd);
    if (null_fd >= 0) ::close(null_fd);
    throw std::runtime_error(std::string("spawn: ") + std::strerror(err));
  }

  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(127);
    if (spec.own_process_group) ::setpgid(0, 0);
    ::dup2(null_fd, 0);
    ::dup2(log_fd, 1);
    ::dup2(log_fd, 2);
    ::execve(argv[0], argv.data(), envp.data());
    int err = errno;
    ssize_t ignored = ::write(pipe_fd[1], &err, sizeof err);
    (void)ignored;
    ::_exit(127);
  }
  int fork_errno = errno;
  if (pid > 0 && spec.own_process_group) ::setpgid(pid, pid);  // no race with our kill(-pid)
  ::close(pipe_fd[1]);
  ::close(log_fd);
  ::close(null_fd);
  if (pid < 0) {
    ::close(pipe_fd[0]);
    throw std::runtime_error(std::string("fork: ") + std::strerror(fork_errno));
  }
  int exec_errno = 0;
  ssize_t n;
  do {
    n = ::read(pipe_fd[0], &exec_errno, sizeof exec_errno);
  } while (n < 0 && errno == EINTR);
  ::close(pipe_fd[0]);
  if (n == static_cast<ssize_t>(sizeof exec_errno)) {
    ::waitpid(pid, nullptr, 0);
    throw std::runtime_error("cannot execute " + spec.argv[0] + ": " + std::strerror(exec_errno));
  }
  return pid;
}

std::optional<ExitStatus> try_reap(pid_t pid) {
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(pid, &status, WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == 0) return std::nullopt;
  if (r < 0) return ExitStatus{};  // not our child any more: "status unknown"
  return from_wait_status(status);
}

ExitStatus wait_for(pid_t pid, milliseconds timeout, bool kill_group) {
  auto deadline = steady_clock::now() + timeout;
  // A pidfd becomes readable the moment the process ends, so the wait adds no polling delay
  // to the wall times measured through run_timed().
  int pidfd = -1;
#ifdef SYS_pidfd_open
  pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#endif
  std::optional<ExitStatus> done;
  for (;;) {
    done = try_reap(pid);
    if (done) break;
    auto left = std::chrono::duration_cast<milliseconds>(deadline - steady_clock::now());
    if (left.count() <= 0) break;
    if (pidfd >= 0) {
      pollfd p{pidfd, POLLIN, 0};
      ::poll(&p, 1, static_cast<int>(std::min<long long>(left.count() + 1, INT_MAX)));
    } else {
      std::this_thread::sleep_for(std::min(left, milliseconds(1)));
    }
  }
  if (pidfd >= 0) ::close(pidfd);
  if (done) return *done;
  ::kill(kill_group ? -pid : pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  ExitStatus s = from_wait_status(status);
  s.timed_out = true;
  return s;
}

std::pair<ExitStatus, double> run_timed(const SpawnSpec& spec, milliseconds timeout) {
  auto t0 = steady_clock::now();
  pid_t pid = spawn(spec);
  ExitStatus st = wait_for(pid, timeout);
  return {st, std::chrono::duration<double>(steady_clock::now() - t0).count()};
}

std::string file_tail(const std::string& path, int max_lines, const std::string& indent) {
  auto text = read_whole_file(path);
  if (!text || text->empty()) return "";
  std::vector<std::string> lines;
  std::istringstream in(*text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  size_t first = lines.size() > static_cast<size_t>(max_lines) ? lines.size() - max_lines : 0;
  std::string out;
  for (size_t i = first; i < lines.size(); ++i) {
    std::string& l = lines[i];
    if (l.size() > 300) l = l.substr(0, 300) + "...";
    out += indent + l + "\n";
  }
  return out;
}

TempDir::TempDir() {
  std::string tmpl = (fs::temp_directory_path() / "remora-bench.XXXXXX").string();
  if (!::mkdtemp(tmpl.data())) {
    throw std::system_error(errno, std::generic_category(), "mkdtemp " + tmpl);
  }
  path_ = tmpl;
}

TempDir::~TempDir() {
  if (keep_ || path_.empty()) return;
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::string self_exe_path() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : p.string();
}

std::string self_exe_dir() {
  std::string p = self_exe_path();
  return p.empty() ? p : fs::path(p).parent_path().string();
}

std::pair<std::optional<Server>, Failure> start_server(const ServerConfig& c) {
  std::string state_dir = c.work_dir + "/state-" + c.name;
  std::string ready = c.work_dir + "/ready-" + c.name;
  Server s;
  s.log_path = c.work_dir + "/server-" + c.name + ".log";
  std::error_code ec;
  fs::create_directories(state_dir, ec);

  SpawnSpec spec;
  spec.argv = {c.binary,  "--listen", c.listen_url, "--state-dir",  state_dir, "--backend",
               c.backend, "--auth",   "none",       "--ready-file", ready};
  // A private benchmark server without authentication: say so for a network listener.
  if (c.listen_url.rfind("shm://", 0) != 0) spec.argv.push_back("--insecure");
  spec.argv.insert(spec.argv.end(), c.extra_args.begin(), c.extra_args.end());
  spec.log_path = s.log_path;
  spec.own_process_group = true;
  try {
    s.pid = spawn(spec);
  } catch (const std::exception& e) {
    return {std::nullopt, {"remora-server did not start", e.what()}};
  }

  std::string scheme = c.listen_url.substr(0, c.listen_url.find("://") + 3);
  auto deadline = steady_clock::now() + c.ready_timeout;
  for (;;) {
    if (fs::exists(ready, ec)) {
      // The server renames a complete file into place, so one read sees all of it.
      std::istringstream in(read_whole_file(ready).value_or(""));
      std::string first, match;
      for (std::string line; std::getline(in, line);) {
        if (line.empty()) continue;
        if (first.empty()) first = line;
        if (match.empty() && line.rfind(scheme, 0) == 0) match = line;
      }
      s.url = match.empty() ? first : match;
      if (!s.url.empty()) return {s, {}};
    }
    if (auto st = try_reap(s.pid)) {
      return {std::nullopt,
              {"remora-server exited (" + st->describe() + ")",
               "remora-server exited before it was ready (" + st->describe() + "); log " +
                   s.log_path + ":\n" + file_tail(s.log_path, 15)}};
    }
    if (steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(milliseconds(5));
  }
  ::kill(-s.pid, SIGKILL);
  wait_for(s.pid, milliseconds(5000), true);
  std::string secs = std::to_string(c.ready_timeout.count() / 1000.0);
  secs.erase(secs.find_last_not_of('0') + 1);
  if (!secs.empty() && secs.back() == '.') secs.pop_back();
  return {std::nullopt,
          {"remora-server not ready after " + secs + " s",
           "no ready file " + ready + " after " + secs + " s (server killed); log " + s.log_path +
               ":\n" + file_tail(s.log_path, 15)}};
}

ExitStatus stop_server(const Server& server, milliseconds grace) {
  ::kill(server.pid, SIGTERM);
  return wait_for(server.pid, grace, true);
}

}  // namespace remora::bench
