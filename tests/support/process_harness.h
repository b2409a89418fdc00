// Test harness for real processes: a remora-server started with a private state directory
// and sockets, and applications run through the shim. Used by the integration tests (and
// the RDMA tests inside the VM).
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

namespace remora::testing {

// Directory of the build's binaries (REMORA_BIN_DIR, set by CTest).
std::string BinDir();
// Path of libremora.so.
std::string ShimPath();
// What a program built without sanitizers needs first in LD_PRELOAD to load a shim built
// with them (the shared ASan runtime; REMORA_SANITIZER_PRELOAD, set by CTest in such builds),
// or "" in normal builds.
std::string SanitizerPreload();

class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

struct ServerOptions {
  std::vector<std::string> transports = {"shm", "tcp"};  // shm | tcp | rdma (rdma needs rdma_host)
  std::string backend = "host";
  int host_gpus = 1;
  std::string host_gpu_memory = "4GiB";
  bool auth = false;              // false: --auth none
  std::string state_dir;          // empty: a fresh one in the server's temp dir
  std::string rdma_host;          // address to bind rdma:// to
  std::vector<std::string> extra_args;
  std::vector<std::string> launcher;  // prefix of the command line, e.g. {"prlimit", "--nofile=256:256", "--"}
  std::map<std::string, std::string> env;  // added to the server's environment
};

class ServerProcess {
 public:
  ServerProcess() = default;
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // Starts remora-server and waits until it is ready; false (with the log printed) if it
  // exits or does not get ready within 30 s.
  bool Start(const ServerOptions& options = {});
  // SIGTERM and wait; returns its exit status (-1 on timeout, after SIGKILL).
  int Stop(int timeout_s = 20);
  bool Alive() const;
  pid_t pid() const { return pid_; }
  // The URL it listens on for "shm", "tcp" or "rdma".
  std::string Url(const std::string& transport) const;
  std::string Log() const;
  const std::string& state_dir() const { return state_dir_; }
  const std::string& dir() const { return dir_.path(); }

 private:
  TempDir dir_;
  std::string state_dir_;
  pid_t pid_ = -1;
  std::vector<std::string> urls_;
};

struct RunResult {
  int exit_code = -1;  // 128+N when killed by signal N; -1 on timeout
  std::string output;  // stdout and stderr interleaved
};

// Runs `argv` with `env` added to this process's environment, capturing its output.
RunResult Run(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env = {},
              int timeout_s = 120);
// Runs one of our test programs (bin/<name>) through the shim against `url`.
RunResult RunApp(const std::string& name, const std::string& url, const std::vector<std::string>& args = {},
                 const std::map<std::string, std::string>& env = {}, int timeout_s = 120);

// A program started in the background whose output can be waited on.
class BackgroundProcess {
 public:
  BackgroundProcess(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env);
  ~BackgroundProcess();
  // Waits until the output contains `text`; false after timeout_s or if the process exits.
  bool WaitForOutput(const std::string& text, int timeout_s = 60);
  void Kill(int sig);
  // Waits for exit; returns the exit code (128+N for signal N), -1 on timeout.
  int Wait(int timeout_s = 60);
  std::string Output();
  pid_t pid() const { return pid_; }

 private:
  void Drain();
  pid_t pid_ = -1;
  int out_fd_ = -1;
  std::string output_;
  int status_ = -1;
  bool exited_ = false;
};

std::map<std::string, std::string> ShimEnv(const std::string& url);

// The parent of a process, or -1 once it is gone (a zombie counts as gone).
pid_t ParentOf(pid_t pid);
// Live processes whose name (comm) is `comm`: all of them, or the children of `parent`.
std::vector<pid_t> ProcessesNamed(const std::string& comm);
std::vector<pid_t> ChildrenNamed(pid_t parent, const std::string& comm);

}  // namespace remora::testing
