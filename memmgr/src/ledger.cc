#include "remora/memmgr/ledger.h"

#include <pthread.h>

#include <cerrno>
#include <cstring>
#include <new>

namespace remora {

namespace {
constexpr uint64_t kLedgerMagic = 0x315247444c524d52ull;  // "RMRLDGR1"
}

struct LedgerTenantRow {
  uint32_t in_use;
  uint32_t pad;
  char name[64];
  uint64_t limit[kLedgerMaxGpus];
  uint64_t refused;
};

struct LedgerSessionRow {
  uint32_t in_use;
  uint32_t tenant;
  uint64_t session_id;
  uint64_t used[kLedgerMaxGpus];
  uint64_t overhead[kLedgerMaxGpus];
};

struct LedgerRegion {
  uint64_t magic;
  uint64_t bytes;
  pthread_mutex_t mu;
  LedgerTenantRow tenants[kLedgerMaxTenants];
  LedgerSessionRow sessions[kLedgerMaxSessions];
};

namespace {

// RAII lock of the robust, process-shared mutex.
class RegionLock {
 public:
  explicit RegionLock(LedgerRegion* r) : r_(r) {
    int rc = pthread_mutex_lock(&r_->mu);
    // The previous owner died holding the lock. Every mutation is one store, so the data is
    // consistent: mark the mutex usable again.
    if (rc == EOWNERDEAD) pthread_mutex_consistent(&r_->mu);
  }
  ~RegionLock() { pthread_mutex_unlock(&r_->mu); }
  RegionLock(const RegionLock&) = delete;
  RegionLock& operator=(const RegionLock&) = delete;

 private:
  LedgerRegion* r_;
};

uint64_t TenantUsedLocked(const LedgerRegion* r, uint32_t tenant, uint32_t gpu) {
  uint64_t sum = 0;
  for (const auto& s : r->sessions)
    if (s.in_use && s.tenant == tenant) sum += s.used[gpu];
  return sum;
}

}  // namespace

size_t LedgerRegionBytes() { return sizeof(LedgerRegion); }

Result<Ledger> Ledger::Create(void* mem, size_t bytes) {
  if (bytes < sizeof(LedgerRegion)) return Error(Err::kInvalidValue, "ledger region too small");
  std::memset(mem, 0, sizeof(LedgerRegion));
  auto* r = static_cast<LedgerRegion*>(mem);
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  int rc = pthread_mutex_init(&r->mu, &attr);
  pthread_mutexattr_destroy(&attr);
  if (rc != 0) return Error(Err::kInitializationError, "pthread_mutex_init: {}", std::strerror(rc));
  r->bytes = sizeof(LedgerRegion);
  r->magic = kLedgerMagic;
  return Ledger(r);
}

Result<Ledger> Ledger::Attach(void* mem, size_t bytes) {
  auto* r = static_cast<LedgerRegion*>(mem);
  if (bytes < sizeof(LedgerRegion) || r->magic != kLedgerMagic || r->bytes != sizeof(LedgerRegion))
    return Error(Err::kInitializationError, "ledger region is not formatted (or from another version)");
  return Ledger(r);
}

Result<uint32_t> Ledger::AddTenant(std::string_view name) {
  if (name.empty() || name.size() >= sizeof(LedgerTenantRow::name)) return Error(Err::kInvalidValue, "bad tenant name");
  RegionLock lock(r_);
  int free_row = -1;
  for (uint32_t i = 0; i < kLedgerMaxTenants; i++) {
    auto& t = r_->tenants[i];
    if (t.in_use && name == t.name) return i;
    if (!t.in_use && free_row < 0) free_row = static_cast<int>(i);
  }
  if (free_row < 0) return Error(Err::kMemoryAllocation, "the ledger holds at most {} tenants", kLedgerMaxTenants);
  auto& t = r_->tenants[free_row];
  std::memset(&t, 0, sizeof(t));
  std::memcpy(t.name, name.data(), name.size());
  for (auto& l : t.limit) l = kUnlimited;
  t.in_use = 1;
  return static_cast<uint32_t>(free_row);
}

Status Ledger::RemoveTenant(uint32_t tenant) {
  if (tenant >= kLedgerMaxTenants) return Error(Err::kInvalidValue, "bad tenant index");
  RegionLock lock(r_);
  for (const auto& s : r_->sessions)
    if (s.in_use && s.tenant == tenant) return Error(Err::kNotPermitted, "tenant has open sessions");
  r_->tenants[tenant].in_use = 0;
  return Status::Ok();
}

Status Ledger::SetLimit(uint32_t tenant, uint32_t gpu, uint64_t limit) {
  if (tenant >= kLedgerMaxTenants || gpu >= kLedgerMaxGpus) return Error(Err::kInvalidValue, "bad tenant or GPU index");
  RegionLock lock(r_);
  if (!r_->tenants[tenant].in_use) return Error(Err::kInvalidValue, "no such tenant");
  r_->tenants[tenant].limit[gpu] = limit;
  return Status::Ok();
}

Result<uint32_t> Ledger::OpenSession(uint32_t tenant, uint64_t session_id) {
  if (tenant >= kLedgerMaxTenants) return Error(Err::kInvalidValue, "bad tenant index");
  RegionLock lock(r_);
  if (!r_->tenants[tenant].in_use) return Error(Err::kInvalidValue, "no such tenant");
  for (uint32_t i = 0; i < kLedgerMaxSessions; i++) {
    auto& s = r_->sessions[i];
    if (s.in_use) continue;
    std::memset(&s, 0, sizeof(s));
    s.tenant = tenant;
    s.session_id = session_id;
    s.in_use = 1;
    return i;
  }
  return Error(Err::kMemoryAllocation, "the ledger holds at most {} sessions", kLedgerMaxSessions);
}

std::vector<uint64_t> Ledger::CloseSession(uint32_t slot) {
  std::vector<uint64_t> held(kLedgerMaxGpus, 0);
  if (slot >= kLedgerMaxSessions) return held;
  RegionLock lock(r_);
  auto& s = r_->sessions[slot];
  if (!s.in_use) return held;
  for (uint32_t g = 0; g < kLedgerMaxGpus; g++) held[g] = s.used[g];
  s.in_use = 0;
  return held;
}

Status Ledger::Reserve(uint32_t slot, uint32_t gpu, uint64_t bytes) {
  if (slot >= kLedgerMaxSessions || gpu >= kLedgerMaxGpus) return Error(Err::kInvalidValue, "bad session or GPU index");
  RegionLock lock(r_);
  auto& s = r_->sessions[slot];
  if (!s.in_use) return Error(Err::kDevicesUnavailable, "session is closed");
  auto& t = r_->tenants[s.tenant];
  uint64_t used = TenantUsedLocked(r_, s.tenant, gpu);
  uint64_t limit = t.limit[gpu];
  if (bytes > limit || used > limit - bytes) {
    t.refused++;
    return Error(Err::kMemoryAllocation, "tenant '{}' memory limit on GPU {} reached: {} in use + {} requested > {} limit",
                 t.name, gpu, used, bytes, limit);
  }
  s.used[gpu] += bytes;
  return Status::Ok();
}

void Ledger::Release(uint32_t slot, uint32_t gpu, uint64_t bytes) {
  if (slot >= kLedgerMaxSessions || gpu >= kLedgerMaxGpus) return;
  RegionLock lock(r_);
  auto& s = r_->sessions[slot];
  if (!s.in_use) return;
  s.used[gpu] = bytes > s.used[gpu] ? 0 : s.used[gpu] - bytes;
}

void Ledger::SetContextOverhead(uint32_t slot, uint32_t gpu, uint64_t bytes) {
  if (slot >= kLedgerMaxSessions || gpu >= kLedgerMaxGpus) return;
  RegionLock lock(r_);
  if (r_->sessions[slot].in_use) r_->sessions[slot].overhead[gpu] = bytes;
}

TenantUsage Ledger::Tenant(uint32_t tenant, uint32_t gpu) const {
  TenantUsage u;
  if (tenant >= kLedgerMaxTenants || gpu >= kLedgerMaxGpus) return u;
  RegionLock lock(r_);
  const auto& t = r_->tenants[tenant];
  if (!t.in_use) return u;
  u.limit = t.limit[gpu];
  u.refused = t.refused;
  for (const auto& s : r_->sessions) {
    if (!s.in_use || s.tenant != tenant) continue;
    u.used += s.used[gpu];
    u.context_overhead += s.overhead[gpu];
    u.sessions++;
  }
  return u;
}

uint64_t Ledger::SessionUsed(uint32_t slot, uint32_t gpu) const {
  if (slot >= kLedgerMaxSessions || gpu >= kLedgerMaxGpus) return 0;
  RegionLock lock(r_);
  return r_->sessions[slot].in_use ? r_->sessions[slot].used[gpu] : 0;
}

uint32_t Ledger::SessionTenant(uint32_t slot) const {
  if (slot >= kLedgerMaxSessions) return UINT32_MAX;
  RegionLock lock(r_);
  return r_->sessions[slot].in_use ? r_->sessions[slot].tenant : UINT32_MAX;
}

uint64_t Ledger::GpuUsed(uint32_t gpu) const {
  if (gpu >= kLedgerMaxGpus) return 0;
  RegionLock lock(r_);
  uint64_t sum = 0;
  for (const auto& s : r_->sessions)
    if (s.in_use) sum += s.used[gpu];
  return sum;
}

}  // namespace remora
