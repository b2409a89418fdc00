// Results of one suite run (native or through one transport) and their JSON form.
//
// Contract: a suite child writes a RunResult as JSON to its --out file, atomically (temporary
// name, then rename) and again after every measurement, so that the parent can read the
// finished part of a run whose child later crashed or hung. The parent adds the figures it
// measures itself (the external app's wall time) to the same structure.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "json.hpp"
#include "stats.hpp"  // median

namespace remora::bench {

struct Measurement {
  std::optional<double> value;  // median of the samples, in the metric's unit
  std::vector<double> samples;  // one per repetition, in the metric's unit
  long iterations = 0;          // operations timed per repetition
  std::string error;            // non-empty: this measurement failed (short reason)
  std::string error_detail;     // the failing call and its error, when known
};

struct RunResult {
  std::string label;         // "native", "shm", "tcp", ...
  std::string server_url;    // remoted runs: the URL the child was pointed at
  bool completed = false;    // the suite ran to its end (individual metrics may still have failed)
  std::string error;         // non-empty: the run as a whole failed (short reason)
  std::string error_detail;  // longer explanation (e.g. the tail of a log), may be empty
  std::string device_name;
  int device_count = 0;
  int runtime_version = 0;  // cudaRuntimeGetVersion as seen by the app (0 if it failed)
  int driver_version = 0;   // cudaDriverGetVersion as seen by the app (0 if it failed)
  std::map<std::string, Measurement> metrics;  // by metric id

  bool failed() const { return !error.empty(); }
};


json::Value to_json(const RunResult& r);
RunResult run_from_json(const json::Value& v);

// Writes `text` to `path` through `path`.tmp + rename(2). Throws std::system_error.
void write_file_atomic(const std::string& path, const std::string& text);
// Whole file, or nullopt if it cannot be read.
std::optional<std::string> read_whole_file(const std::string& path);

}  // namespace remora::bench
