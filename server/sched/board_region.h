// The compute board's shared-memory layout and the decisions taken on one GPU's row of it:
// private to remora_sched (board.cc, board_gpu.cc). The layout is plain data that the
// supervisor and every worker map; ComputeBoard (board.h) is its only interface.
//
// Every worker maps the whole board writable, so every value in it may be anything a
// compromised worker wrote (docs/SECURITY.md, N3). A value read from the board is never used
// as an index before it is bounded: session slots, tenants, priorities, weights and the turn
// word's owner go through the accessors below (TenantOf, Prio, Weight, S, T; Turn::Decode),
// which map anything out of range to "no session" or to a valid row. The worst a worker can
// do is misplace turns and GPU time on its GPUs.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <ctime>

#include "sched/board.h"

namespace remora::sched {

inline constexpr uint64_t kVtScale = 100;  // virtual time: GPU ns * kVtScale / weight (weight 100: ns)

struct TenantSettingsRow {
  std::atomic<uint32_t> weight;    // effective, 1..kMaxWeight
  std::atomic<uint32_t> priority;  // Priority
  std::atomic<uint64_t> quota_ns;  // 0: no cap
  std::atomic<uint64_t> period_ns;
};

struct TenantRunRow {
  std::atomic<uint64_t> vt;         // weighted virtual time (wraps; compared as differences)
  std::atomic<uint64_t> usage_ns;   // GPU time charged on this GPU since the tenant was added
  std::atomic<int64_t> tokens_ns;   // cap bucket
  std::atomic<uint64_t> refill_ns;  // when the bucket was last refilled
  std::atomic<uint64_t> busy_ns;    // when a session of it last asked for, got or kept the GPU
};

struct SessionRunRow {
  std::atomic<uint32_t> state;  // RunState
  std::atomic<uint64_t> usage_ns;
  std::atomic<uint64_t> waiting_since;
  std::atomic<uint64_t> drain_until;  // a holder told to drain expects to be done by then
};

struct GpuRow {
  pthread_mutex_t mu;
  std::atomic<uint32_t> enabled;
  std::atomic<uint32_t> waiting;  // sessions in kWaiting (under mu)
  std::atomic<uint32_t> yield;    // the holder should end its turn now
  std::atomic<uint64_t> turn;
  std::atomic<uint64_t> turn_end;
  std::atomic<uint64_t> contended_since;  // when the first of the current waiters arrived
  // The GPU's virtual time: the least virtual time among the tenants competing in a Best(),
  // or the virtual time of a tenant charged while nobody waits; never going back (compared as
  // differences). A tenant that becomes busy when nobody else is
  // starts from it, so credit from before an idle time is not banked (ClampOnBusy).
  std::atomic<uint64_t> vclock;
  std::atomic<uint64_t> class_seen_ns[kNumPriorities];
  TenantRunRow tenants[kBoardMaxTenants];
  SessionRunRow sessions[kBoardMaxSessions];
};

struct BoardRegion {
  uint64_t magic;
  uint64_t bytes;
  Tunables tunables;
  TenantSettingsRow settings[kBoardMaxTenants];
  std::atomic<uint32_t> session_tenant[kBoardMaxSessions];  // tenant + 1; 0: closed
  GpuRow gpus[kBoardMaxGpus];
};

namespace board_internal {

inline int64_t Diff(uint64_t a, uint64_t b) { return static_cast<int64_t>(a - b); }

// Values read from the board, bounded (see the top of this file).
inline uint32_t BoardTenantOf(const BoardRegion* r, uint32_t slot) {
  if (slot >= kBoardMaxSessions) return kNoSession;
  uint32_t t = r->session_tenant[slot].load(std::memory_order_acquire);
  return t == 0 || t > kBoardMaxTenants ? kNoSession : t - 1;
}
inline uint32_t BoardWeight(const BoardRegion* r, uint32_t t) {
  if (t >= kBoardMaxTenants) return kDefaultWeight;
  uint32_t w = r->settings[t].weight.load(std::memory_order_relaxed);
  return w == 0 ? kDefaultWeight : w > kMaxWeight ? kMaxWeight : w;
}
inline uint32_t BoardPriority(const BoardRegion* r, uint32_t t) {
  if (t >= kBoardMaxTenants) return static_cast<uint32_t>(Priority::kNormal);
  uint32_t p = r->settings[t].priority.load(std::memory_order_relaxed);
  return p < static_cast<uint32_t>(kNumPriorities) ? p : static_cast<uint32_t>(Priority::kNormal);
}

// The GPU row's mutex: tried (workers) or waited for with a timeout (supervisor: a quarter of
// a second, so that a compromised worker holding it delays the supervisor that long per GPU at
// most; an honest holder keeps it for microseconds). A dead holder's lock is taken over and
// marked consistent: every mutation is a single store.
class GpuLock {
 public:
  GpuLock(GpuRow& g, bool wait) : mu_(&g.mu) {
    int rc;
    if (wait) {
      struct timespec deadline;
      clock_gettime(CLOCK_REALTIME, &deadline);
      deadline.tv_nsec += 250'000'000;
      if (deadline.tv_nsec >= 1'000'000'000) {
        deadline.tv_sec += 1;
        deadline.tv_nsec -= 1'000'000'000;
      }
      rc = pthread_mutex_timedlock(mu_, &deadline);
    } else {
      rc = pthread_mutex_trylock(mu_);
    }
    if (rc == EOWNERDEAD) {
      pthread_mutex_consistent(mu_);
      rc = 0;
    }
    held_ = rc == 0;
  }
  ~GpuLock() {
    if (held_) pthread_mutex_unlock(mu_);
  }
  GpuLock(const GpuLock&) = delete;
  GpuLock& operator=(const GpuLock&) = delete;
  bool held() const { return held_; }

 private:
  pthread_mutex_t* mu_;
  bool held_ = false;
};

// Decisions on one GPU's row, with its lock held (except where a method says otherwise).
class GpuOps {
 public:
  GpuOps(BoardRegion* r, uint32_t gpu) : r_(r), g_(r->gpus[gpu]) {}

  // The tenant of `slot`: kNoSession for a closed slot, a slot out of range, or a tenant
  // word out of range.
  uint32_t TenantOf(uint32_t slot) const { return BoardTenantOf(r_, slot); }
  // A tenant's weight, 1..kMaxWeight (`t` a valid tenant, as TenantOf returns).
  uint32_t Weight(uint32_t t) const { return BoardWeight(r_, t); }
  // A tenant's class, < kNumPriorities.
  uint32_t Prio(uint32_t t) const { return BoardPriority(r_, t); }
  // Rows of a slot or tenant: callers pass a slot below kBoardMaxSessions (a loop index, the
  // caller's own slot, or an owner Turn::Decode bounded) and a tenant TenantOf returned.
  SessionRunRow& S(uint32_t slot) { return g_.sessions[slot % kBoardMaxSessions]; }
  TenantRunRow& T(uint32_t t) { return g_.tenants[t % kBoardMaxTenants]; }

  // Refills a capped tenant's bucket up to now. Lock held (charges subtract concurrently).
  void Refill(uint32_t t, uint64_t now);

  bool Eligible(uint32_t t, uint64_t now);

  // The lag a tenant may be ahead, in its own virtual-time units.
  int64_t LagVt(uint32_t t) const {
    return static_cast<int64_t>(r_->tunables.lag_ns * kVtScale / Weight(t));
  }

  // The session that should hold the GPU next: among the waiting ones (and `extra`, a
  // holder asking to continue), those whose tenant is eligible (cap); of those, the highest
  // class among tenants within their share, then the smallest virtual time, then the
  // longest wait. kNoSession if none is eligible.
  uint32_t Best(uint64_t now, uint32_t extra);

  // Moves the GPU's virtual time forward to `vt` (never back). Lock not needed.
  void AdvanceClock(uint64_t vt);

  // A turn's length: the quantum for the heaviest tenant competing in the last Best(), in
  // proportion to weight for lighter ones (so a small share gets short, frequent turns and
  // holds over short windows), never below a tenth of the quantum.
  uint64_t TurnLength(uint32_t slot);

  // Whether `t` has a session other than `slot` that waits or holds an active turn.
  bool Busy(uint32_t t, uint32_t slot);

  // A tenant that becomes busy after an idle time starts at most one quantum (of its own GPU
  // time) behind the busy tenants, or behind the GPU's virtual time when none is busy: credit
  // is not banked while idle (an idle tenant's share went to the others, and a tenant that had
  // the GPU to itself at the end of a busy time owes nobody). A pause shorter than two quanta
  // - a loop's synchronisation - is not idleness: the tenant keeps its place.
  void ClampOnBusy(uint32_t t, uint32_t slot, uint64_t now);

  void Touch(uint32_t slot, uint64_t now) {
    uint32_t t = TenantOf(slot);
    if (t != kNoSession) T(t).busy_ns.store(now, std::memory_order_relaxed);
  }

  void EnterWaiting(uint32_t slot, uint64_t now);

  // Gives the turn to `b` (kNoSession: nobody), if the turn word is still `expected`.
  bool Grant(uint32_t b, uint64_t expected, uint64_t now);

  // The holder should have reacted to the waiters (or ended its drain) long ago.
  bool Unresponsive(uint32_t owner, uint64_t now);

 private:
  BoardRegion* r_;
  GpuRow& g_;
  uint32_t max_weight_ = 0;  // of the eligible candidates of the last Best()
};

}  // namespace board_internal
}  // namespace remora::sched
