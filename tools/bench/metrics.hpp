// The catalogue of remora-bench metrics and the --only selection.
//
// Contract: metric ids are stable (they appear in --json output and in --only); a selector
// given to --only selects every metric whose id starts with it, so "memcpy" selects all copies,
// "memcpy_h2d_pinned" one row family and "memcpy_h2d_pinned_64MiB" a single row.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace remora::bench {

enum class Unit { Microseconds, Seconds, GBps };

// "us", "s" or "GB/s" (GB = 1e9 bytes).
const char* unit_name(Unit u);
// Times are better when lower, bandwidths when higher.
bool lower_is_better(Unit u);

enum class Family {
  SyncRoundTrip,  // cudaStreamQuery on an idle stream
  LaunchSync,     // null kernel <<<1,1>>> + cudaDeviceSynchronize
  LaunchAsync,    // many null launches on one stream, one sync; time per launch
  Memcpy,         // cudaMemcpy of `bytes` in direction `h2d` from pinned or pageable memory
  Memset,         // cudaMemset of `bytes`
  AppWall,        // whole-process wall time of an external program (matmul_tiled)
};

struct MetricDef {
  std::string id;
  std::string label;
  Unit unit;
  Family family;
  size_t bytes = 0;     // Memcpy/Memset
  bool h2d = false;     // Memcpy
  bool pinned = false;  // Memcpy
};

// All metrics in table order.
const std::vector<MetricDef>& metric_catalog();
const MetricDef* find_metric(const std::string& id);

// Set of selectors from --only; empty means "all metrics".
class Selection {
 public:
  Selection() = default;
  explicit Selection(std::vector<std::string> selectors) : selectors_(std::move(selectors)) {}
  bool selected(const std::string& id) const;
  bool any_selected() const;
  const std::vector<std::string>& selectors() const { return selectors_; }
  // Error text naming the first selector that matches no metric, or nullopt.
  std::optional<std::string> validate() const;

 private:
  std::vector<std::string> selectors_;
};

// "4 KiB", "64 MiB", ...
std::string format_bytes(size_t bytes);

}  // namespace remora::bench
