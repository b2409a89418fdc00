#include "process_harness.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

extern char** environ;

namespace remora::testing {
namespace fs = std::filesystem;

namespace {

uint64_t NowMs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

int ExitCode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

// fork+exec with stdout/stderr to `out_fd` (or a file if out_path given).
pid_t Spawn(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env, int out_fd) {
  pid_t pid = ::fork();
  if (pid != 0) return pid;
  ::setpgid(0, 0);
  if (out_fd >= 0) {
    ::dup2(out_fd, 1);
    ::dup2(out_fd, 2);
  }
  int devnull = ::open("/dev/null", O_RDONLY);
  ::dup2(devnull, 0);
  for (auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
  std::vector<char*> a;
  for (auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
  a.push_back(nullptr);
  ::execvp(a[0], a.data());
  std::fprintf(stderr, "cannot exec %s: %s\n", a[0], std::strerror(errno));
  ::_exit(127);
}

}  // namespace

std::string BinDir() {
  const char* d = std::getenv("REMORA_BIN_DIR");
  return d ? d : "bin";
}

std::string ShimPath() {
  const char* s = std::getenv("REMORA_SHIM");
  return s ? s : BinDir() + "/../lib/libremora.so";
}

std::string SanitizerPreload() {
  const char* s = std::getenv("REMORA_SANITIZER_PRELOAD");
  return s ? s : "";
}

TempDir::TempDir() {
  std::string base = std::getenv("REMORA_TEST_TMP") ? std::getenv("REMORA_TEST_TMP") : "/tmp";
  std::string tmpl = base + "/remora-test.XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) std::abort();
  path_ = buf.data();
}

TempDir::~TempDir() {
  std::error_code ec;
  if (!std::getenv("REMORA_KEEP_TEST_DIRS")) fs::remove_all(path_, ec);
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0) Stop(10);
}

namespace {

// Inside the Soft-RoCE VM (tests/rdma/vm-run.sh sets REMORA_VM) every program runs 10-50 times
// slower than on its host under QEMU's TCG, and slower again when the host is busy: a session
// worker took up to 14 s to start there with four clients at once on a loaded 2-core host.
// The deadlines these tests do not test are scaled to match (servers: --deadline and
// --handshake-timeout; clients: REMORA_DEADLINE_S, which also bounds a worker's set-up);
// a test that sets one itself keeps its own.
bool InSlowVm() { return std::getenv("REMORA_VM") != nullptr; }
constexpr const char* kVmDeadlineS = "60";

bool HasArg(const std::vector<std::string>& args, const std::string& name) {
  return std::find(args.begin(), args.end(), name) != args.end();
}

}  // namespace

bool ServerProcess::Start(const ServerOptions& o) {
  state_dir_ = o.state_dir.empty() ? dir_.path() + "/state" : o.state_dir;
  std::vector<std::string> argv = {BinDir() + "/remora-server", "--state-dir", state_dir_, "--backend", o.backend,
                                   "--ready-file", dir_.path() + "/ready", "--auth", o.auth ? "token" : "none",
                                   "--log-level", "debug", "--drain-timeout", "5"};
  if (o.backend == "host") {
    argv.insert(argv.end(), {"--host-gpus", std::to_string(o.host_gpus), "--host-gpu-memory", o.host_gpu_memory});
  }
  for (const std::string& t : o.transports) {
    argv.push_back("--listen");
    if (t == "shm") argv.push_back("shm://" + dir_.path() + "/remora.sock");
    else if (t == "tcp") argv.push_back("tcp://127.0.0.1:0");
    else if (t == "rdma") argv.push_back("rdma://" + o.rdma_host + ":0");
  }
  // Test servers without authentication are private to the test (loopback, a temporary
  // directory): say so for their network listeners.
  bool network = false;
  for (const std::string& t : o.transports) network |= t != "shm";
  if (!o.auth && network) argv.push_back("--insecure");
  if (InSlowVm() && !HasArg(o.extra_args, "--deadline")) argv.insert(argv.end(), {"--deadline", kVmDeadlineS});
  if (InSlowVm() && !HasArg(o.extra_args, "--handshake-timeout")) argv.insert(argv.end(), {"--handshake-timeout", "30000"});
  argv.insert(argv.end(), o.extra_args.begin(), o.extra_args.end());
  argv.insert(argv.begin(), o.launcher.begin(), o.launcher.end());
  int log = ::open((dir_.path() + "/server.log").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  ::unlink((dir_.path() + "/ready").c_str());
  pid_ = Spawn(argv, o.env, log);
  ::close(log);
  uint64_t deadline = NowMs() + 30000;
  while (NowMs() < deadline) {
    int status;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      std::fprintf(stderr, "remora-server exited early (%d):\n%s\n", ExitCode(status), Log().c_str());
      pid_ = -1;
      return false;
    }
    std::ifstream in(dir_.path() + "/ready");
    urls_.clear();
    for (std::string l; std::getline(in, l);)
      if (!l.empty()) urls_.push_back(l);
    if (!urls_.empty()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::fprintf(stderr, "remora-server not ready after 30 s:\n%s\n", Log().c_str());
  return false;
}

int ServerProcess::Stop(int timeout_s) {
  if (pid_ <= 0) return -1;
  ::kill(pid_, SIGTERM);
  uint64_t deadline = NowMs() + static_cast<uint64_t>(timeout_s) * 1000;
  int status = 0;
  while (NowMs() < deadline) {
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return ExitCode(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(-pid_, SIGKILL);
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
  return -1;
}

bool ServerProcess::Alive() const { return pid_ > 0 && ::kill(pid_, 0) == 0 && ::waitpid(pid_, nullptr, WNOHANG) == 0; }

std::string ServerProcess::Url(const std::string& transport) const {
  for (const std::string& u : urls_)
    if (u.rfind(transport + "://", 0) == 0) return u;
  return "";
}

std::string ServerProcess::Log() const {
  std::ifstream in(dir_.path() + "/server.log");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::map<std::string, std::string> ShimEnv(const std::string& url) {
  // The runtime shim, the driver facade and NVML, as remora-run preloads them (behind the
  // sanitizer runtime, which must come first); the library directory also answers programs
  // linked against libcuda.so.1 by SONAME.
  std::string shim = ShimPath();
  std::string dir = shim.substr(0, shim.rfind('/'));
  std::string libs = shim + ":" + dir + "/libcuda.so.1:" + dir + "/libnvidia-ml.so.1";
  std::string preload = SanitizerPreload();
  // The caller's library path stays behind ours (on the GPU host: the bundle's libsodium).
  const char* inherited = std::getenv("LD_LIBRARY_PATH");
  std::string path = inherited != nullptr && *inherited != '\0' ? dir + ":" + inherited : dir;
  std::map<std::string, std::string> env = {{"LD_PRELOAD", preload.empty() ? libs : preload + ":" + libs},
                                             {"LD_LIBRARY_PATH", path},
                                             {"REMORA_SERVER", url}};
  if (InSlowVm()) env["REMORA_DEADLINE_S"] = kVmDeadlineS;
  return env;
}

RunResult Run(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env, int timeout_s) {
  BackgroundProcess p(argv, env);
  RunResult r;
  r.exit_code = p.Wait(timeout_s);
  r.output = p.Output();
  return r;
}

RunResult RunApp(const std::string& name, const std::string& url, const std::vector<std::string>& args,
                 const std::map<std::string, std::string>& env, int timeout_s) {
  std::vector<std::string> argv = {BinDir() + "/" + name};
  argv.insert(argv.end(), args.begin(), args.end());
  auto e = ShimEnv(url);
  for (auto& [k, v] : env) e[k] = v;
  return Run(argv, e, timeout_s);
}

BackgroundProcess::BackgroundProcess(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) std::abort();
  pid_ = Spawn(argv, env, p[1]);
  ::close(p[1]);
  out_fd_ = p[0];
  ::fcntl(out_fd_, F_SETFL, O_NONBLOCK);
}

BackgroundProcess::~BackgroundProcess() {
  if (!exited_ && pid_ > 0) {
    ::kill(pid_, SIGKILL);
    Wait(10);
  }
  if (out_fd_ >= 0) ::close(out_fd_);
}

void BackgroundProcess::Drain() {
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(out_fd_, buf, sizeof(buf));
    if (n <= 0) return;
    output_.append(buf, static_cast<size_t>(n));
  }
}

bool BackgroundProcess::WaitForOutput(const std::string& text, int timeout_s) {
  uint64_t deadline = NowMs() + static_cast<uint64_t>(timeout_s) * 1000;
  while (NowMs() < deadline) {
    Drain();
    if (output_.find(text) != std::string::npos) return true;
    int status;
    if (!exited_ && ::waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      status_ = status;
    }
    if (exited_) {
      Drain();
      return output_.find(text) != std::string::npos;
    }
    struct pollfd pf = {out_fd_, POLLIN, 0};
    ::poll(&pf, 1, 20);
  }
  return false;
}

void BackgroundProcess::Kill(int sig) {
  if (!exited_) ::kill(pid_, sig);
}

int BackgroundProcess::Wait(int timeout_s) {
  uint64_t deadline = NowMs() + static_cast<uint64_t>(timeout_s) * 1000;
  while (!exited_) {
    Drain();
    int status;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      status_ = status;
      break;
    }
    if (NowMs() >= deadline) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      exited_ = true;
      Drain();
      return -1;
    }
    struct pollfd pf = {out_fd_, POLLIN, 0};
    ::poll(&pf, 1, 20);
  }
  Drain();
  return ExitCode(status_);
}

std::string BackgroundProcess::Output() {
  Drain();
  return output_;
}

pid_t ParentOf(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  std::getline(in, stat);
  size_t close = stat.rfind(')');
  if (close == std::string::npos || close + 4 >= stat.size() || stat[close + 2] == 'Z') return -1;
  return std::stoi(stat.substr(close + 4));
}

std::vector<pid_t> ProcessesNamed(const std::string& comm) {
  std::vector<pid_t> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream c(e.path() / "comm");
    std::string got;
    std::getline(c, got);
    pid_t pid = std::stoi(name);
    if (got == comm && ParentOf(pid) >= 0) out.push_back(pid);
  }
  return out;
}

std::vector<pid_t> ChildrenNamed(pid_t parent, const std::string& comm) {
  std::vector<pid_t> out;
  for (pid_t pid : ProcessesNamed(comm))
    if (ParentOf(pid) == parent) out.push_back(pid);
  return out;
}

}  // namespace remora::testing
