// The measurement suite: what `remora-bench --run-suite` runs in a child process, natively or
// under the shim (the child cannot tell which, and does not try to).
//
// Contract: runs the selected metrics of the catalogue (all but AppWall, which the parent
// measures) on device 0 and writes a RunResult as JSON to `out_path`, atomically and after
// every metric. Each metric: warm-up, then several repetitions of a timed loop, host-timed
// with std::chrono::steady_clock, the loop closed by a synchronising call so that queued work
// is inside the timed interval; the value is the median repetition. A failing CUDA call fails
// that metric only (its error is recorded, cudaGetLastError clears it and the suite goes on).
// Exit status: 0 when the suite ran to its end (some metrics may have failed), 1 when CUDA
// could not be initialised (no device, no driver, no server: `error` says which), 2 when the
// result file could not be written.
#pragma once

#include <string>

#include "metrics.hpp"

namespace remora::bench {

struct SuiteOptions {
  std::string out_path;
  std::string label;  // recorded in the result ("native", "shm", ...)
  bool quick = false;
  Selection selection;
};

int run_suite(const SuiteOptions& options);

}  // namespace remora::bench
