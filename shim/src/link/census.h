// Census: with REMORA_CALL_STATS set, the client counts every request it sends - round trips
// (calls that wait for their reply) and posted calls - per request kind and, for generated
// calls, per API function (named from the descriptions' wire numbers). The tool for finding
// which calls an application waits for per operation (what makes a remoted step slower than a
// native one over a network).
//
//   REMORA_CALL_STATS=1      the whole session's table on stderr when it ends
//   REMORA_CALL_STATS=PATH   one JSON line per interval appended to PATH: an interval runs from
//                            cudaProfilerStart (cuProfilerStart) to cudaProfilerStop, the
//                            markers profilers use for a capture range (torch.cuda.profiler.
//                            start()/stop()); a last line with the whole session at its end.
//
// A line: {"interval": N | "session", "messages", "round_trips", "posted", "synchronising",
// "other_round_trips", "calls": [{"call", "round_trips", "posted", "synchronising"}...],
// "details": {WHAT: count...}} - details only where a caller noted some (Detail: which
// attribute a cuDNN query that went to the server asked, say).
// "synchronising" round trips are those the application asked to wait for (a stream, event
// or device synchronisation, a query, a copy into host memory it reads next); the rest
// ("other_round_trips") are what Remora made it wait for besides. The markers themselves are
// outside every interval. Off: one relaxed load per send. Thread-safe; one per process.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "remora.capnp.h"

namespace remora::shim {

class Census {
 public:
  // The process's census, or nullptr when REMORA_CALL_STATS does not ask for one.
  static Census* Get();
  // A census writing intervals to `path` (empty: stderr at the end only); for tests.
  explicit Census(std::string path) : path_(std::move(path)) {}

  void Count(const wire::Request::Reader& req, bool round_trip);
  // A finer account of a call just counted (`what` names it, e.g. the attribute a query asked).
  void Detail(const std::string& what);
  // The session ends: the table (stderr) or the session's line (the file), once.
  void Report();

  // Totals of the interval in progress (or of the last one, once stopped).
  struct Totals {
    uint64_t messages = 0, round_trips = 0, posted = 0, synchronising = 0;
  };
  Totals interval() const;
  Totals session() const;
  // The JSON lines the file gets: the whole session's, the current (or last) interval's.
  std::string SessionLine() const;
  std::string IntervalLine() const;

 private:
  struct Key {
    uint16_t which, library;
    uint32_t function;
    bool round_trip;
    auto operator<=>(const Key&) const = default;
  };
  using Counts = std::map<Key, uint64_t>;
  static std::string Name(const Key& k, bool* synchronising);
  static Totals Sum(const Counts& c);
  std::string LineLocked(const std::string& label, const Counts& c, const std::map<std::string, uint64_t>& details) const;
  void Append(const std::string& line) const;

  const std::string path_;
  mutable std::mutex mu_;
  Counts session_, interval_;
  std::map<std::string, uint64_t> session_details_, interval_details_;
  bool in_interval_ = false;
  int intervals_ = 0;
  bool reported_ = false;
};

}  // namespace remora::shim
