// The bench parent: runs the suite natively and under the shim for each transport, and
// measures the external app's wall time, collecting everything into a Report.
//
// Contract: nothing here initialises CUDA (the parent only forks and execs). Each run is
// isolated: a transport whose server does not start, or whose child crashes or hangs, gets a
// column whose `error` says why, and the next transport still runs. One remora-server is
// started per transport (fresh state directory, --auth none) and stopped with SIGTERM before
// the next one starts, so transports never share a server or compete for the GPU.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "metrics.hpp"
#include "results.hpp"
#include "tcp_ceiling.hpp"

namespace remora::bench {

struct Transport {
  std::string name;  // "shm", "tcp", "tcp-enc", or a user-given name
  std::string url;   // explicit --listen URL; empty: the default for `name` (shm or tcp)
  // REMORA_ENCRYPT for the application: "on" (tcp-enc), "off" (tcp: loopback is not
  // encrypted by default anyway, this makes it explicit), "" (NAME=URL: the default, auto).
  std::string encrypt;
};

// Parses "shm", "tcp", "tcp-enc" (tcp with the data path encrypted, REMORA_ENCRYPT=on) or
// "NAME=URL"; throws std::invalid_argument with a message otherwise.
Transport parse_transport(const std::string& spec);

struct BenchOptions {
  std::vector<Transport> transports;
  bool quick = false;
  Selection selection;
  std::string backend = "cuda";  // server backend: "cuda" or "host"
  std::string server_bin;
  std::string shim;
  std::string matmul;  // path of the app, or empty when none was found (row skipped)
  std::vector<std::string> server_args;
  std::chrono::seconds child_timeout{300};
  std::chrono::seconds ready_timeout{30};
  bool keep_temp = false;
};

struct Column {
  RunResult result;
  std::vector<std::string> notes;  // printed under the table
};

struct Report {
  std::string version, commit, date, host;
  bool quick = false;
  bool host_emulated = false;
  std::string matmul;  // app path, empty if not measured
  int matmul_runs = 0;
  std::string matmul_note;      // why the app was not measured, if it was selected but not run
  std::string temp_dir;         // kept temp dir (logs), empty when it was removed
  std::vector<Column> columns;  // columns[0] is native, then one per transport
  // Raw loopback TCP with 1, 2, 4 and 8 streams (64 MiB split, best of 7), when a tcp
  // transport ran: the ceiling of the tcp columns' bulk figures on this machine.
  std::vector<CeilingPoint> tcp_ceiling;
};

Report run_benchmark(const BenchOptions& options);

// True when every column ran and every selected metric of every column has a value.
bool report_ok(const Report& report, const Selection& selection);

}  // namespace remora::bench
