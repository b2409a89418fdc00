// ComputeBoard: the compute-share state of every GPU of a server, in shared memory that the
// supervisor formats and every worker maps (like the quota ledger). It holds each tenant's
// settings, each (GPU, tenant)'s virtual time, usage and cap bucket, each (GPU, session)'s
// state and usage, and per GPU the *turn*: the session that may issue GPU work now.
//
// Scheduling model (docs/ARCHITECTURE.md, "Compute shares"): without MPS a GPU runs one
// context at a time and time-slices between contexts that all have work, so the board hands
// the GPU to one session at a time, for a quantum, and each worker issues its session's GPU
// work only during its own turns. The worker measures how long its work keeps the GPU busy
// (sched/gate.h) and charges it here; the next turn goes to the waiting session whose tenant
// is furthest behind its weighted share (smallest virtual time), except that a tenant of a
// higher priority class is served first while it is within `lag` of the furthest-behind one.
// An idle session holds no turn (work-conserving); a capped tenant (compute.max) is not
// eligible while its bucket is empty, even if the GPU would otherwise idle.
//
// Concurrency: settings, usage counters, virtual time and the turn word are atomics, read
// without a lock; every change of who waits and who holds a turn happens under the GPU's
// process-shared robust mutex. Workers only ever *try* the lock (a worker never blocks its
// loop on another process) and retry on their next poll; the supervisor waits for it with a
// timeout. A process killed anywhere leaves every field consistent: each mutation is a
// single atomic store, and the next locker marks a dead owner's mutex consistent. A worker
// that dies holding a turn loses it when the supervisor closes its slot; one that stops
// answering loses it `hung_grace` after it should have ended its turn.
//
// Trust: the workers are the server's own processes. A compromised worker can take more
// GPU time than its share (it could as well ignore the board and launch), never another
// tenant's memory or handles. Pure code: no CUDA, no I/O; the caller passes the time.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "remora/base/status.h"
#include "sched/compute_settings.h"

namespace remora::sched {

inline constexpr uint32_t kBoardMaxGpus = 16;
inline constexpr uint32_t kBoardMaxTenants = 256;   // the ledger's tenant indices
inline constexpr uint32_t kBoardMaxSessions = 512;  // the ledger's session slots
inline constexpr uint32_t kNoSession = UINT32_MAX;

struct Tunables {
  uint64_t quantum_ns = 5'000'000;       // a turn, when others wait
  uint64_t lag_ns = 20'000'000;          // GPU time a tenant may be ahead and still count as within its share
  uint64_t preempt_budget_ns = 0;        // work a lower class keeps in flight while a higher one is present (0: one launch)
  uint64_t presence_ns = 100'000'000;    // how long a request of a class keeps lower classes' work in flight small
  uint64_t linger_ns = 100'000;          // a holder whose work completed keeps the turn this long for more (unless asked to yield)
  uint64_t hung_grace_ns = 200'000'000;  // a turn holder that does not react this long after it should is passed over
  uint64_t min_burst_ns = 1'000'000;     // a capped tenant becomes eligible again with this much GPU time in its bucket
};

enum class RunState : uint32_t { kClosed = 0, kIdle = 1, kWaiting = 2, kOwner = 3 };

// The turn word: who holds the GPU and whether that holder is idle (then anyone may take it).
struct Turn {
  uint32_t owner = kNoSession;
  bool idle = false;
  uint64_t generation = 0;
  static Turn Decode(uint64_t word);
  uint64_t Encode() const;
};

struct BoardRegion;  // plain data laid out for shared memory; see board.cc

class ComputeBoard {
 public:
  static size_t RegionBytes();
  // Formats `mem` (at least RegionBytes(), any content) as an empty board.
  static Result<ComputeBoard> Create(void* mem, size_t bytes, const Tunables& tunables = {});
  // Uses a region another process formatted.
  static Result<ComputeBoard> Attach(void* mem, size_t bytes);

  const Tunables& tunables() const;

  // ---- supervisor --------------------------------------------------------------------
  // A new tenant row (usage and virtual time zeroed) / new settings for an existing one
  // (applied to running sessions at their next decision).
  void AddTenant(uint32_t tenant, const ComputeSettings& settings);
  void SetTenant(uint32_t tenant, const ComputeSettings& settings);
  // Enforcement on `gpu`: off (the default) costs the workers one load per launch and
  // measures nothing. Turning it off drops every turn and queue of that GPU.
  void SetEnabled(uint32_t gpu, bool on);
  // A session slot opens idle on every GPU; closing it hands over any turn it holds.
  void OpenSession(uint32_t slot, uint32_t tenant);
  void CloseSession(uint32_t slot, uint64_t now_ns);

  // ---- queries (any process, no lock) ------------------------------------------------
  bool enabled(uint32_t gpu) const;
  uint64_t TenantUsageNs(uint32_t tenant, uint32_t gpu) const;
  uint64_t SessionUsageNs(uint32_t slot, uint32_t gpu) const;
  // The session whose turn it is on `gpu` (kNoSession if none or idle).
  uint32_t TurnOwner(uint32_t gpu) const;
  uint32_t Waiting(uint32_t gpu) const;
  uint32_t SessionTenant(uint32_t slot) const;  // kNoSession if closed
  RunState SessionState(uint32_t slot, uint32_t gpu) const;

  // ---- workers (sched/gate.h is the only caller) -------------------------------------
  enum class Outcome { kGranted, kWait, kRenewed, kDrain, kLost, kBusy };
  uint64_t turn_word(uint32_t gpu) const;
  uint64_t turn_end(uint32_t gpu) const;
  // Someone else wants the GPU: a session waits, or the holder was asked to yield.
  bool Contended(uint32_t gpu) const;
  bool YieldRequested(uint32_t gpu) const;
  // A session of a higher class than `tenant`'s asked for this GPU within `presence`.
  bool HigherClassPresent(uint32_t gpu, uint32_t tenant, uint64_t now_ns) const;
  // GPU time left in a capped tenant's bucket (INT64_MAX without a cap).
  int64_t CapTokens(uint32_t gpu, uint32_t tenant) const;
  Priority TenantPriority(uint32_t tenant) const;

  // `slot` has work to issue and does not hold the turn: registers it as waiting and grants
  // the turn if the GPU is free, its holder idle or unresponsive. kGranted, kWait or kBusy
  // (the lock was taken: ask again later). Asks a lower-class holder to yield when `slot`
  // should preempt it.
  Outcome Request(uint32_t gpu, uint32_t slot, uint64_t now_ns);
  // The holder's turn is over (or it was asked to yield) while it still has work: kRenewed
  // (it stays the best choice), kDrain (stop issuing, Release once the work in flight is
  // done, expected in `inflight_ns`), kLost or kBusy.
  Outcome EndTurn(uint32_t gpu, uint32_t slot, uint64_t now_ns, uint64_t inflight_ns);
  // The holder gives the turn back (drained, or idle while others wait); it stays waiting
  // if `has_work`. A waiter that no longer has work withdraws the same way. false: the lock
  // was taken, ask again later.
  bool Release(uint32_t gpu, uint32_t slot, uint64_t now_ns, bool has_work);
  // The holder has nothing in flight and nothing to issue: anyone may take the GPU. false if
  // the turn changed meanwhile.
  bool MarkIdle(uint32_t gpu, uint32_t slot);
  // The idle holder has work again: takes its turn back unless someone took it.
  bool TryActivate(uint32_t gpu, uint32_t slot, uint64_t now_ns);
  // GPU time the session's work kept the GPU busy: its usage, its tenant's usage, virtual
  // time and cap bucket. Lock-free.
  void Charge(uint32_t gpu, uint32_t slot, uint64_t ns);

 private:
  explicit ComputeBoard(BoardRegion* r) : r_(r) {}
  BoardRegion* r_;
};

}  // namespace remora::sched
