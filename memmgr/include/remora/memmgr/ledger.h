// The quota ledger: device memory per tenant and GPU, exact under concurrency across
// processes. The supervisor formats a region (shared memory it maps into every worker);
// workers reserve before each driver allocation and release after each free; when a worker
// dies, however it dies, the supervisor closes its session slot and everything it held
// returns to the tenant.
//
// Consistency: one process-shared robust mutex guards the region. A tenant's usage is the
// sum of its sessions' slots, and every mutation is a single store under the lock, so a
// process killed at any instant leaves the ledger consistent (the next locker marks the
// mutex consistent and carries on). Pure code: no CUDA, no I/O.
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
  // Uses a region another process formatted.
  static Result<Ledger> Attach(void* mem, size_t bytes);

  // ---- supervisor ------------------------------------------------------------------
  // Index of the tenant (created if new). Limits start unlimited.
  Result<uint32_t> AddTenant(std::string_view name);
  // Fails with kNotPermitted while the tenant has open sessions.
  Status RemoveTenant(uint32_t tenant);
  Status SetLimit(uint32_t tenant, uint32_t gpu, uint64_t limit);
  Result<uint32_t> OpenSession(uint32_t tenant, uint64_t session_id);
  // Releases everything the session holds; returns the bytes it held per GPU.
  std::vector<uint64_t> CloseSession(uint32_t slot);

  // ---- workers (their own slot) ------------------------------------------------------
  // Charges `bytes` on `gpu` to the slot's tenant, or fails with kMemoryAllocation (and
  // counts a refusal) if the tenant's limit would be exceeded.
  Status Reserve(uint32_t slot, uint32_t gpu, uint64_t bytes);
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
  LedgerRegion* r_;
};

}  // namespace remora
