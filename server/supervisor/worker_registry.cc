#include "supervisor/worker_registry.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "remora/base/log.h"
#include "remora/base/util.h"

namespace remora::server {
namespace {

// Fields of /proc/PID/stat after the command name: state is field 3, starttime field 22.
bool ReadStat(pid_t pid, std::string* comm, char* state, uint64_t* start) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return false;
  size_t open = stat.find('('), close = stat.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open) return false;
  *comm = stat.substr(open + 1, close - open - 1);
  std::istringstream rest(stat.substr(close + 1));
  std::string field;
  std::vector<std::string> fields;
  while (rest >> field) fields.push_back(field);
  if (fields.size() < 20) return false;  // fields[0] is field 3
  *state = fields[0].empty() ? '?' : fields[0][0];
  *start = std::strtoull(fields[19].c_str(), nullptr, 10);
  return true;
}

// Still running as the process we recorded (a zombie has ended).
bool Running(pid_t pid, uint64_t start, const std::string& name) {
  std::string comm;
  char state = '?';
  uint64_t now_start = 0;
  if (!ReadStat(pid, &comm, &state, &now_start)) return false;
  return state != 'Z' && state != 'X' && now_start == start && comm == name;
}

}  // namespace

uint64_t ProcessStartTime(pid_t pid) {
  std::string comm;
  char state;
  uint64_t start = 0;
  return ReadStat(pid, &comm, &state, &start) ? start : 0;
}

WorkerRegistry::WorkerRegistry(std::string state_dir, SignalFn signal, std::string worker_name)
    : path_(std::move(state_dir) + "/workers"), signal_(std::move(signal)), worker_name_(std::move(worker_name)) {}

Result<int> WorkerRegistry::EndPredecessors(int timeout_ms) {
  std::map<pid_t, uint64_t> old;
  {
    std::ifstream in(path_);
    long long pid;
    unsigned long long start;
    while (in >> pid >> start)
      if (pid > 1) old[static_cast<pid_t>(pid)] = start;
  }
  int ended = 0;
  for (auto [pid, start] : old) {
    if (!Running(pid, start, worker_name_)) continue;
    LOG_WARN("worker {} of a previous server still runs (its server died while it was stopped or stuck): ending it",
             pid);
    // SIGKILL: it may be stopped; the driver frees its GPU memory.
    if (Status st = signal_(pid, SIGKILL); !st.ok()) LOG_WARN("{}", st.message());
    ended++;
  }
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  workers_.clear();
  for (auto [pid, start] : old) {
    while (Running(pid, start, worker_name_) && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (!Running(pid, start, worker_name_)) continue;
    // Stuck in the kernel (a driver call): it dies when that returns. Kept in the list, so a
    // later restart looks again; its GPU memory counts in no tenant's ledger meanwhile.
    LOG_ERROR("worker {} of a previous server has not ended {} ms after SIGKILL; its GPU memory stays in use until "
              "it does", pid, timeout_ms);
    workers_[pid] = start;
  }
  RETURN_IF_ERROR(Save());
  return ended;
}

Status WorkerRegistry::Add(pid_t pid) {
  uint64_t start = ProcessStartTime(pid);
  if (start == 0) return Status::Ok();  // already gone: nothing to find later
  workers_[pid] = start;
  return Save();
}

Status WorkerRegistry::Remove(pid_t pid) {
  if (workers_.erase(pid) == 0) return Status::Ok();
  return Save();
}

Status WorkerRegistry::Save() {
  std::string tmp = path_ + ".new";
  {
    std::ofstream out(tmp, std::ios::trunc);
    for (auto [pid, start] : workers_) out << pid << ' ' << start << '\n';
    out.flush();
    if (!out) return Error(Err::kUnknown, "cannot write {}", tmp);
  }
  if (std::rename(tmp.c_str(), path_.c_str()) != 0) return ErrnoStatus(Err::kUnknown, "rename " + tmp, errno);
  return Status::Ok();
}

}  // namespace remora::server
