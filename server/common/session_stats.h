// Per-session counters that a worker publishes and the supervisor reads (for /metrics): one
// page of shared memory per session, a memfd the supervisor creates and hands to the worker
// as worker_args::kStatsFd. It is separate from the quota ledger on purpose: a worker maps
// only its own block, and nothing here is trusted for any decision (a worker can only
// misreport its own counters).
//
// Concurrency: one writer (the worker's executor thread), any number of readers in any
// process. Each counter is a lock-free 64-bit atomic that only grows; readers load each one
// with relaxed ordering, so a snapshot is per-counter exact but not a consistent cut.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "remora/base/fd.h"
#include "remora/base/status.h"

namespace remora {

struct SessionCounters {
  std::atomic<uint64_t> calls{0};              // requests dispatched
  std::atomic<uint64_t> bytes_to_device{0};    // host -> device bytes requested by copies
  std::atomic<uint64_t> bytes_from_device{0};  // device -> host bytes requested by copies
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared counters must be lock-free");

// Owns one block: the memfd and its mapping (unmapped, then closed, on destruction).
// Move-only.
class SessionStatsBlock {
 public:
  SessionStatsBlock() = default;
  ~SessionStatsBlock();
  SessionStatsBlock(SessionStatsBlock&& o) noexcept;
  SessionStatsBlock& operator=(SessionStatsBlock&& o) noexcept;
  SessionStatsBlock(const SessionStatsBlock&) = delete;
  SessionStatsBlock& operator=(const SessionStatsBlock&) = delete;

  // The supervisor's side: a fresh zeroed block.
  static Result<SessionStatsBlock> Create();
  // The worker's side: maps the block behind `fd` (which it then owns).
  static Result<SessionStatsBlock> Attach(Fd fd);

  bool valid() const { return counters_ != nullptr; }
  SessionCounters* counters() const { return counters_; }
  int fd() const { return fd_.get(); }

 private:
  void Reset();
  Fd fd_;
  SessionCounters* counters_ = nullptr;
};

}  // namespace remora
