// Child processes for remora-bench: spawning with an edited environment, waiting with a
// deadline, and the remora-server lifecycle (start, wait for the ready file, SIGTERM).
//
// Contract: the bench parent is single-threaded and never initialises CUDA, so fork() is safe.
// Every child gets PR_SET_PDEATHSIG(SIGTERM), so none outlives a killed bench, and has its
// stdout and stderr redirected to a log file. Nothing here throws past a failed spawn:
// failures come back as values that carry a short reason (for a table cell) and a detail.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace remora::bench {

struct ExitStatus {
  bool timed_out = false;  // killed by us (SIGKILL) after the deadline
  bool exited = false;     // normal exit; `code` is valid
  int code = -1;
  int signal = 0;  // killed by this signal (when !exited)
  bool success() const { return exited && code == 0 && !timed_out; }
  // "exit status 1", "killed by SIGSEGV", "timed out (killed)".
  std::string describe() const;
};

struct SpawnSpec {
  std::vector<std::string> argv;  // argv[0] is the program path (no PATH search)
  // Environment edits on top of the parent's: value set, or nullopt to unset.
  std::vector<std::pair<std::string, std::optional<std::string>>> env;
  std::string log_path;  // stdout and stderr go here (appended); empty: /dev/null
  // Start a process group of its own (pgid = pid), so that a forced kill can take the
  // program's own children along (remora-server's per-session workers).
  bool own_process_group = false;
};

// Starts the program. Throws std::runtime_error when it cannot be executed (exec's errno is
// reported back through a close-on-exec pipe, so a missing binary is an error here, not a
// child that exits 127).
pid_t spawn(const SpawnSpec& spec);

// Waits for `pid` to end, at most `timeout`; on timeout kills it (its whole process group
// when `kill_group`, for a child spawned with own_process_group) with SIGKILL and reaps it.
ExitStatus wait_for(pid_t pid, std::chrono::milliseconds timeout, bool kill_group = false);

// Reaps `pid` if it has ended, without blocking.
std::optional<ExitStatus> try_reap(pid_t pid);

// Runs a program to completion; returns its status and its wall time (fork to reap) in s.
std::pair<ExitStatus, double> run_timed(const SpawnSpec& spec, std::chrono::milliseconds timeout);

// Last `max_lines` lines of a text file ("" if unreadable), each indented by `indent`.
std::string file_tail(const std::string& path, int max_lines, const std::string& indent = "    ");

// A fresh directory from mkdtemp, removed recursively on destruction unless keep() was called.
class TempDir {
 public:
  TempDir();  // throws std::system_error
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  void keep() { keep_ = true; }

 private:
  std::string path_;
  bool keep_ = false;
};

// Directory of the running executable (/proc/self/exe), "" if unknown.
std::string self_exe_dir();
std::string self_exe_path();

// ---- remora-server ---------------------------------------------------------------------

struct ServerConfig {
  std::string binary;
  std::string listen_url;  // what to pass to --listen
  std::string backend;     // "cuda" or "host"
  std::string work_dir;    // state dir, ready file and log go under here
  std::string name;        // transport name, for file names and messages
  std::vector<std::string> extra_args;
  std::chrono::milliseconds ready_timeout{30000};
};

struct Server {
  pid_t pid = -1;
  std::string url;  // the line of the ready file that matches listen_url's scheme
  std::string log_path;
};

struct Failure {
  std::string reason;  // short, for a table cell
  std::string detail;  // longer, e.g. with a log tail
};

// Starts remora-server and waits until its ready file appears. On failure the server (if it
// started) has been killed and reaped.
std::pair<std::optional<Server>, Failure> start_server(const ServerConfig& config);

// SIGTERM, then wait up to `grace` for it to drain and exit; after that SIGKILL to its whole
// process group (the server and any workers it left).
ExitStatus stop_server(const Server& server, std::chrono::milliseconds grace);

}  // namespace remora::bench
