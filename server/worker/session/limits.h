// Per-session resource limits (docs/SECURITY.md, "Resource limits"): everything a client can
// make its worker hold is bounded, and running into a bound is a CUDA error the application
// sees (cudaErrorMemoryAllocation, naming the limit and the server flag that sets it) or
// back-pressure (the worker stops reading until it has caught up) - never an out-of-memory
// worker.
//
// The executor and the handlers call the narrow hooks below; the numbers come from the
// supervisor (`remora-server --session-limit NAME=VALUE`, passed to the worker as one
// argument). Pure data and arithmetic: no I/O, not thread-safe (the executor's thread).
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <string>
#include <string_view>

#include "remora/base/status.h"

namespace remora::worker {

enum class Resource {
  kStreams,      // created streams plus per-thread default streams
  kEvents,
  kModules,      // loaded modules
  kModuleBytes,  // bytes of module images held (loaded, or being received)
  kPools,        // memory pools created
  kGraphs,       // graphs and their executable instances
  kCallbacks,    // host functions waiting for their client
  kPinnedBytes,  // client host memory mapped and pinned for zero-copy
  // Added for issue 40 (N1, N4); the supervisor also bounds IPC exports per session and per
  // tenant (server/supervisor/ipc_registry.h), so a worker that skips this check gains nothing.
  kIpcExports,   // CUDA IPC exports live (memory, events, pools, physical memory)
  kLibObjects,   // objects of the math libraries (handles, descriptors, plans, layouts...)
  kGraphNodes,   // nodes of the session's graphs and executable graphs
  kCount
};

struct SessionLimits {
  uint64_t max[static_cast<int>(Resource::kCount)] = {
      4096,             // streams
      65536,            // events
      4096,             // modules
      4ull << 30,       // module bytes
      64,               // pools
      4096,             // graphs
      4096,             // callbacks
      16ull << 30,      // pinned bytes
      4096,             // IPC exports
      65536,            // library objects
      262144,           // graph nodes
  };
  // Back-pressure bounds: past them the executor reads no further request until it has
  // caught up (the client then blocks in its own send, as on a full GPU queue).
  uint64_t pending_ops = 8192;        // operations in flight plus frames kept in the backlog
  uint64_t spill_bytes = 64ull << 20;   // bulk read ahead for backlogged frames

  uint64_t limit(Resource r) const { return max[static_cast<int>(r)]; }

  // "streams=4096,module-bytes=4GiB,..." (names as in Name()); unknown names are errors.
  static Result<SessionLimits> Parse(std::string_view text);
  // Applies one NAME=VALUE (the server's --session-limit).
  Status Set(std::string_view assignment);
  std::string Format() const;
};

const char* ResourceName(Resource r);  // "streams", "module-bytes", ...

// Counts what a session holds of each resource. Handlers ask before they create: Acquire
// fails (and counts nothing) past the limit.
class ResourceCounter {
 public:
  explicit ResourceCounter(const SessionLimits& limits) : limits_(limits) {}

  // kMemoryAllocation: "session limit reached: at most N of streams (remora-server
  // --session-limit streams=N)".
  Status Acquire(Resource r, uint64_t n = 1);
  void Release(Resource r, uint64_t n = 1);
  uint64_t held(Resource r) const { return held_[static_cast<int>(r)]; }
  // For resources a table counts itself (handles): may `adding` more join `held_now`?
  Status Room(Resource r, uint64_t held_now, uint64_t adding = 1) const;
  // Back-pressure: may the executor read another frame with `in_flight` operations and
  // backlogged frames?
  bool MayRead(uint64_t in_flight) const { return in_flight < limits_.pending_ops; }
  const SessionLimits& limits() const { return limits_; }

  // Device memory a stream-ordered free left in a pool, still charged to the tenant until
  // the pool gives it back (ops_memory.cc reconciles it with the pools' reserved memory).
  uint64_t& pool_retained(int gpu) { return retained_[gpu]; }
  // Device memory charged for a context limit (cudaDeviceSetLimit) on a GPU, beyond its default.
  uint64_t& limit_charge(int gpu, int limit) { return limit_charges_[{gpu, limit}]; }
  // Both kinds of charge above, summed per GPU, and forgotten: for the session's end, when
  // its pools and contexts go with it.
  std::map<int, uint64_t> TakeMemoryCharges() {
    std::map<int, uint64_t> out;
    for (auto& [gpu, bytes] : retained_) out[gpu] += bytes;
    for (auto& [key, bytes] : limit_charges_) out[key.first] += bytes;
    retained_.clear();
    limit_charges_.clear();
    return out;
  }

 private:
  SessionLimits limits_;
  uint64_t held_[static_cast<int>(Resource::kCount)] = {};
  std::map<int, uint64_t> retained_;
  std::map<std::pair<int, int>, uint64_t> limit_charges_;
};

}  // namespace remora::worker
