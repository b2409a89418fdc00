// Shared helpers of the security tests: a host-backend remora-server with authentication
// and tenants, files and processes of the machine, and the hostile client (raw_client.h).
#pragma once

#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "process_harness.h"
#include "raw_client.h"
#include "tenancy_support.h"

namespace remora::security {

using testing::BinDir;
using testing::Eventually;
using testing::JsonField;
using testing::RunResult;
using testing::ServerOptions;
using testing::TenancyServer;

// Regular files under `dir` (recursively) and their total size.
inline uint64_t TreeBytes(const std::string& dir, int* files = nullptr) {
  uint64_t sum = 0;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return 0;
  while (struct dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    std::string p = dir + "/" + n;
    struct stat st;
    if (::lstat(p.c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) sum += TreeBytes(p, files);
    else if (S_ISREG(st.st_mode)) {
      sum += static_cast<uint64_t>(st.st_size);
      if (files) (*files)++;
    }
  }
  ::closedir(d);
  return sum;
}

// A line of /proc/PID/status ("Uid:", "CapEff:", ...), without its key; "" if absent.
inline std::string ProcStatus(pid_t pid, const std::string& key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(key, 0) == 0) {
      std::string v = line.substr(key.size());
      while (!v.empty() && (v[0] == ' ' || v[0] == '\t')) v.erase(0, 1);
      return v;
    }
  return "";
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Worker pids of the server's sessions, from remoractl --json session list.
inline std::vector<pid_t> WorkerPids(TenancyServer& s) {
  std::vector<pid_t> pids;
  RunResult r = s.Ctl({"--json", "session", "list"});
  for (size_t at = 0;;) {
    at = r.output.find("\"worker_pid\":", at);
    if (at == std::string::npos) break;
    at += 13;  // past "worker_pid":
    pids.push_back(static_cast<pid_t>(std::atoi(r.output.c_str() + at)));
  }
  return pids;
}

inline bool IsRoot() { return ::geteuid() == 0; }

}  // namespace remora::security
