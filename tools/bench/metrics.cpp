// The catalogue of remora-bench metrics (see metrics.hpp).
#include "metrics.hpp"

#include <utility>

namespace remora::bench {

const char* unit_name(Unit u) {
  switch (u) {
    case Unit::Microseconds: return "us";
    case Unit::Seconds: return "s";
    case Unit::GBps: return "GB/s";
  }
  return "?";
}

bool lower_is_better(Unit u) { return u != Unit::GBps; }

std::string format_bytes(size_t bytes) {
  if (bytes >= (size_t{1} << 20) && bytes % (size_t{1} << 20) == 0) {
    return std::to_string(bytes >> 20) + " MiB";
  }
  if (bytes >= 1024 && bytes % 1024 == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
}

namespace {

std::vector<MetricDef> build_catalog() {
  std::vector<MetricDef> c;
  c.push_back(
      {"sync_rtt", "cudaStreamQuery, idle stream", Unit::Microseconds, Family::SyncRoundTrip});
  c.push_back({"launch_sync", "null kernel <<<1,1>>> + cudaDeviceSynchronize", Unit::Microseconds,
               Family::LaunchSync});
  c.push_back({"launch_async", "async null launch, 1 stream (per launch)", Unit::Microseconds,
               Family::LaunchAsync});

  const size_t sizes[] = {size_t{4} << 10, size_t{1} << 20, size_t{64} << 20, size_t{256} << 20};
  for (bool pinned : {false, true}) {
    for (bool h2d : {true, false}) {
      for (size_t bytes : sizes) {
        std::string compact = format_bytes(bytes);
        compact.erase(compact.find(' '), 1);  // "4 KiB" -> "4KiB" for the id
        MetricDef d;
        d.id = std::string("memcpy_") + (h2d ? "h2d" : "d2h") +
               (pinned ? "_pinned_" : "_pageable_") + compact;
        d.label = std::string("cudaMemcpy ") + (h2d ? "H2D " : "D2H ") +
                  (pinned ? "pinned " : "pageable ") + format_bytes(bytes);
        d.unit = bytes <= (size_t{4} << 10) ? Unit::Microseconds : Unit::GBps;
        d.family = Family::Memcpy;
        d.bytes = bytes;
        d.h2d = h2d;
        d.pinned = pinned;
        c.push_back(std::move(d));
      }
    }
  }

  MetricDef small{"memset_4KiB", "cudaMemset 4 KiB", Unit::Microseconds, Family::Memset};
  small.bytes = size_t{4} << 10;
  c.push_back(small);
  MetricDef large{"memset_64MiB", "cudaMemset 64 MiB", Unit::GBps, Family::Memset};
  large.bytes = size_t{64} << 20;
  c.push_back(large);

  c.push_back({"matmul_wall", "matmul_tiled app wall time", Unit::Seconds, Family::AppWall});
  return c;
}

}  // namespace

const std::vector<MetricDef>& metric_catalog() {
  static const std::vector<MetricDef> catalog = build_catalog();
  return catalog;
}

const MetricDef* find_metric(const std::string& id) {
  for (const auto& d : metric_catalog()) {
    if (d.id == id) return &d;
  }
  return nullptr;
}

bool Selection::selected(const std::string& id) const {
  if (selectors_.empty()) return true;
  for (const auto& s : selectors_) {
    if (id.compare(0, s.size(), s) == 0) return true;
  }
  return false;
}

bool Selection::any_selected() const {
  for (const auto& d : metric_catalog()) {
    if (selected(d.id)) return true;
  }
  return false;
}

std::optional<std::string> Selection::validate() const {
  for (const auto& s : selectors_) {
    bool hit = false;
    for (const auto& d : metric_catalog()) hit = hit || d.id.compare(0, s.size(), s) == 0;
    if (s.empty() || !hit) {
      std::string known;
      for (const auto& d : metric_catalog()) known += "\n  " + d.id;
      return "--only: '" + s + "' matches no metric id (ids, matched by prefix):" + known;
    }
  }
  return std::nullopt;
}

}  // namespace remora::bench
