// WorkerRegistry: the session workers of this server, kept in STATE_DIR/workers so that a
// server restarted on the same state directory after a crash (SIGKILL, OOM killer) finds the
// workers of its predecessor and ends them. A worker notices its supervisor's death by itself
// and ends its session; this catches the ones that cannot: stopped, or stuck in a driver call.
// They are ended rather than adopted: their quota ledger (shared memory) died with the old
// supervisor, and the new ledger must count exactly what is running (docs/ARCHITECTURE.md,
// "Failure model").
//
// The file holds one line per worker, "PID START", START being the process's start time
// (/proc/PID/stat, field 22), so a recycled pid is never mistaken for a worker. It is
// rewritten whole (write, rename) at each change. Loop thread only.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <string>

#include "remora/base/status.h"

namespace remora::server {

class WorkerRegistry {
 public:
  // How a worker is sent a signal (WorkerLauncher::Signal: workers may run as another user).
  using SignalFn = std::function<Status(pid_t, int)>;
  // Opens STATE_DIR/workers; `worker_name` is the workers' process name (comm).
  explicit WorkerRegistry(std::string state_dir, SignalFn signal, std::string worker_name = "remora-worker");

  // SIGKILLs every worker listed by a predecessor that still runs (same pid, same start
  // time, named like a worker) and waits up to timeout_ms for them to go. The new list keeps
  // only those that did not (logged). Returns how many were signalled; an error only if the
  // list cannot be written.
  Result<int> EndPredecessors(int timeout_ms);
  Status Add(pid_t pid);
  Status Remove(pid_t pid);

 private:
  Status Save();

  std::string path_;
  SignalFn signal_;
  std::string worker_name_;
  std::map<pid_t, uint64_t> workers_;  // pid -> start time
};

// A process's start time (clock ticks since boot), or 0 if it is gone.
uint64_t ProcessStartTime(pid_t pid);

}  // namespace remora::server
