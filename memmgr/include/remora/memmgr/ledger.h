// The quota ledger: device memory per tenant and GPU, exact under concurrency across
// processes. The supervisor formats a region (shared memory it maps into every worker);
// workers reserve before each driver allocation and release after each free; when a worker
// dies, however it dies, the supervisor closes its session slot and everything it held
// returns to the tenant.
//
// Who may write what (docs/SECURITY.md, F7, N2): the supervisor owns the region; a worker maps
// it read-only and only its own session slot's page writable (AttachSession). That page holds
// only what the worker owns (its charges, announcements, overhead and refusals); who holds a
// slot (in use, tenant, session id) is in the read-only part. So a compromised worker can
// change nothing but its own tenant's usage as seen through its own slot - not a limit, not
// another session, not the supervisor's bookkeeping - and every value read from a worker's
// page is bounded before use (no value in it is ever an index).
//
// Consistency without a shared lock: a tenant's usage is the sum of its sessions' slots.
// A reservation first announces itself in its slot (`pending`), then sums used + pending
// over the tenant's slots: of two racing reservations at least one sees the other, so the
// committed usage never exceeds the limit (a near-limit race may refuse both). Each store
// is a single atomic word, so a process killed at any instant leaves the ledger
// consistent. Readers take a consistent snapshot of a tenant's slots (each slot counts its
// changes; a pass is retried until no slot changed under it). The supervisor's structural
// changes (tenants, limits, opening and closing slots) take a process-shared robust mutex
// that only it uses. Pure code: no CUDA, no I/O.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "remora/base/status.h"

namespace remora {

inline constexpr uint32_t kLedgerMaxGpus = 16;
inline constexpr uint32_t kLedgerMaxTenants = 256;
inline constexpr uint32_t kLedgerMaxSessions = 512;
inline constexpr uint64_t kUnlimited = UINT64_MAX;

struct LedgerRegion;  // plain data laid out for shared memory; see ledger.cc

// Bytes of memory a region needs.
size_t LedgerRegionBytes();
// Where session slot `slot`'s page lies in the region, and its size: what a worker maps
// writable (AttachSession).
size_t LedgerSlotOffset(uint32_t slot);
size_t LedgerSlotBytes();

struct TenantUsage {
  uint64_t limit = kUnlimited;  // per GPU
  uint64_t used = 0;            // counted against the limit
  uint64_t context_overhead = 0;  // reported separately, not counted
  uint64_t refused = 0;         // allocations refused for this tenant (all GPUs)
  uint32_t sessions = 0;
};

class Ledger {
 public:
  // Formats `mem` (at least LedgerRegionBytes(), any content) as an empty ledger.
  static Result<Ledger> Create(void* mem, size_t bytes);
  // Uses a region another process formatted (supervisor side, or tests).
  static Result<Ledger> Attach(void* mem, size_t bytes);
  // A worker's view: `mem` the whole region mapped read-only, `slot_mem` the page of its
  // own slot mapped writable (LedgerSlotOffset/LedgerSlotBytes). Only the worker calls
  // (Reserve, Release, SetContextOverhead) and the queries may be used on it, and only for
  // `slot`.
  static Result<Ledger> AttachSession(const void* mem, size_t bytes, void* slot_mem, uint32_t slot);

  // ---- supervisor ------------------------------------------------------------------
  // Index of the tenant (created if new). Limits start unlimited.
  Result<uint32_t> AddTenant(std::string_view name);
  // Fails with kNotPermitted while the tenant has open sessions.
  Status RemoveTenant(uint32_t tenant);
  Status SetLimit(uint32_t tenant, uint32_t gpu, uint64_t limit);
  // A limit on the tenant's bytes on all GPUs together (a pool's tenant: the share of its
  // pool-wide limit this server holds; server/pool/). Starts unlimited. Once this returns, no
  // reservation can commit against the previous value unless TenantClaimedTotal, read after
  // it, counts it.
  Status SetTotalLimit(uint32_t tenant, uint64_t limit);
  uint64_t TotalLimit(uint32_t tenant) const;
  // Committed plus in-flight bytes of the tenant on all GPUs.
  uint64_t TenantClaimedTotal(uint32_t tenant) const;
  Result<uint32_t> OpenSession(uint32_t tenant, uint64_t session_id);
  // Releases everything the session holds; returns the bytes it held per GPU.
  std::vector<uint64_t> CloseSession(uint32_t slot);

  // ---- workers (their own slot) ------------------------------------------------------
  // Charges `bytes` on `gpu` to the slot's tenant, or fails with kMemoryAllocation (and
  // counts a refusal) if the tenant's limit would be exceeded. One writer per slot. When the
  // total limit alone refused it, *total_short (if given) gets how many bytes more of it
  // would have let it pass (else 0): a pool's worker then asks for that much more share.
  Status Reserve(uint32_t slot, uint32_t gpu, uint64_t bytes, uint64_t* total_short = nullptr);
  void Release(uint32_t slot, uint32_t gpu, uint64_t bytes);
  void SetContextOverhead(uint32_t slot, uint32_t gpu, uint64_t bytes);

  // ---- queries -----------------------------------------------------------------------
  TenantUsage Tenant(uint32_t tenant, uint32_t gpu) const;
  uint64_t SessionUsed(uint32_t slot, uint32_t gpu) const;
  uint32_t SessionTenant(uint32_t slot) const;
  // Sum over all tenants on one GPU.
  uint64_t GpuUsed(uint32_t gpu) const;

 private:
  explicit Ledger(LedgerRegion* r) : r_(r) {}
  struct LedgerSessionRow* Writable(uint32_t slot) const;
  LedgerRegion* r_;                            // read-only memory in a worker's view
  struct LedgerSessionRow* own_ = nullptr;     // a worker's writable slot
  uint32_t own_slot_ = UINT32_MAX;
};

}  // namespace remora
