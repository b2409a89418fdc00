#include "remora/memmgr/ledger.h"

#include <pthread.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <new>
#include <type_traits>

namespace remora {

namespace {
constexpr uint64_t kLedgerMagic = 0x345247444c524d52ull;  // "RMRLDGR4"
constexpr size_t kPage = 4096;
constexpr uint64_t kMaxReservation = 1ull << 50;  // no GPU has a PiB: refused outright
constexpr uint32_t kBitmapWords = kLedgerMaxSessions / 64;
constexpr int kSnapshotTries = 64;
}  // namespace

// Written by the supervisor only (under the mutex); read by everyone.
struct LedgerTenantRow {
  uint32_t in_use;
  uint32_t pad;
  char name[64];
  uint64_t limit[kLedgerMaxGpus];
  uint64_t total_limit;           // all GPUs together (a pool's share); kUnlimited if none
  uint64_t refused;               // by sessions already closed
  uint64_t slots[kBitmapWords];   // the tenant's open session slots
};

// Written by the supervisor only (under the mutex), in the part every worker maps
// read-only: who holds a slot. A worker can never free its slot, move it to another tenant
// or rename its session (docs/SECURITY.md, N2).
struct LedgerSessionInfo {
  uint32_t in_use;
  uint32_t tenant;
  uint64_t session_id;
};

// One page each: the owning worker maps only this page writable, and it holds only what that
// worker owns - so every value in it may be anything a compromised worker chose, and every
// reader bounds it (Worker()) before use. Fields are changed with single atomic stores.
struct alignas(kPage) LedgerSessionRow {
  uint64_t changes;                // incremented after each change of `used`
  uint64_t used[kLedgerMaxGpus];   // charged and committed
  uint64_t pending[kLedgerMaxGpus];  // a reservation being checked
  uint64_t overhead[kLedgerMaxGpus];
  uint64_t refused;
};
static_assert(sizeof(LedgerSessionRow) == kPage);

struct LedgerRegion {
  uint64_t magic;
  uint64_t bytes;
  pthread_mutex_t mu;
  LedgerTenantRow tenants[kLedgerMaxTenants];
  LedgerSessionInfo infos[kLedgerMaxSessions];
  LedgerSessionRow sessions[kLedgerMaxSessions];
};

namespace {

template <typename T>
T Load(const T& v) {
  return std::atomic_ref<T>(const_cast<T&>(v)).load(std::memory_order_seq_cst);
}
template <typename T>
void Store(T& v, std::type_identity_t<T> x) {
  std::atomic_ref<T>(v).store(x, std::memory_order_seq_cst);
}

// RAII lock of the robust, process-shared mutex (supervisor-side mutations only).
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

bool SlotOfTenant(const LedgerRegion* r, uint32_t slot, uint32_t tenant) {
  const LedgerSessionInfo& s = r->infos[slot];
  return Load(s.in_use) != 0 && Load(s.tenant) == tenant;
}

// A byte count read from a worker's page: whatever it holds, at most kMaxReservation, so that
// sums over all slots cannot wrap and no reader is misled beyond that worker's own tenant.
uint64_t Bounded(uint64_t v) { return v > kMaxReservation ? kMaxReservation : v; }

template <typename Fn>
void ForEachTenantSlot(const LedgerRegion* r, uint32_t tenant, Fn&& fn) {
  const LedgerTenantRow& t = r->tenants[tenant];
  for (uint32_t w = 0; w < kBitmapWords; w++) {
    uint64_t bits = Load(t.slots[w]);
    while (bits != 0) {
      uint32_t slot = w * 64 + static_cast<uint32_t>(__builtin_ctzll(bits));
      bits &= bits - 1;
      if (SlotOfTenant(r, slot, tenant)) fn(slot, r->sessions[slot]);
    }
  }
}

uint64_t SaturatingAdd(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

// Committed plus announced bytes of the tenant on `gpu` (what a reservation checks).
uint64_t TenantClaimed(const LedgerRegion* r, uint32_t tenant, uint32_t gpu) {
  uint64_t sum = 0;
  ForEachTenantSlot(r, tenant, [&](uint32_t, const LedgerSessionRow& s) {
    sum = SaturatingAdd(sum, Bounded(Load(s.used[gpu])));
    sum = SaturatingAdd(sum, Bounded(Load(s.pending[gpu])));
  });
  return sum;
}

// The same over all GPUs.
uint64_t TenantClaimedAll(const LedgerRegion* r, uint32_t tenant) {
  uint64_t sum = 0;
  ForEachTenantSlot(r, tenant, [&](uint32_t, const LedgerSessionRow& s) {
    for (uint32_t g = 0; g < kLedgerMaxGpus; g++) {
      sum = SaturatingAdd(sum, Bounded(Load(s.used[g])));
      sum = SaturatingAdd(sum, Bounded(Load(s.pending[g])));
    }
  });
  return sum;
}

}  // namespace

size_t LedgerRegionBytes() { return sizeof(LedgerRegion); }
size_t LedgerSlotOffset(uint32_t slot) { return offsetof(LedgerRegion, sessions) + size_t{slot} * sizeof(LedgerSessionRow); }
size_t LedgerSlotBytes() { return sizeof(LedgerSessionRow); }

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

Result<Ledger> Ledger::AttachSession(const void* mem, size_t bytes, void* slot_mem, uint32_t slot) {
  ASSIGN_OR_RETURN(Ledger l, Attach(const_cast<void*>(mem), bytes));
  if (slot >= kLedgerMaxSessions) return Error(Err::kInvalidValue, "bad session slot {}", slot);
  l.own_ = static_cast<LedgerSessionRow*>(slot_mem);
  l.own_slot_ = slot;
  return l;
}

LedgerSessionRow* Ledger::Writable(uint32_t slot) const {
  if (own_ != nullptr) return slot == own_slot_ ? own_ : nullptr;
  return &r_->sessions[slot];
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
  t.total_limit = kUnlimited;
  Store(t.in_use, 1u);
  return static_cast<uint32_t>(free_row);
}

Status Ledger::RemoveTenant(uint32_t tenant) {
  if (tenant >= kLedgerMaxTenants) return Error(Err::kInvalidValue, "bad tenant index");
  RegionLock lock(r_);
  for (const auto& s : r_->infos)
    if (s.in_use && s.tenant == tenant) return Error(Err::kNotPermitted, "tenant has open sessions");
  Store(r_->tenants[tenant].in_use, 0u);
  return Status::Ok();
}

Status Ledger::SetLimit(uint32_t tenant, uint32_t gpu, uint64_t limit) {
  if (tenant >= kLedgerMaxTenants || gpu >= kLedgerMaxGpus) return Error(Err::kInvalidValue, "bad tenant or GPU index");
  RegionLock lock(r_);
  if (!r_->tenants[tenant].in_use) return Error(Err::kInvalidValue, "no such tenant");
  Store(r_->tenants[tenant].limit[gpu], limit);
  return Status::Ok();
}

Status Ledger::SetTotalLimit(uint32_t tenant, uint64_t limit) {
  if (tenant >= kLedgerMaxTenants) return Error(Err::kInvalidValue, "bad tenant index");
  RegionLock lock(r_);
  if (!r_->tenants[tenant].in_use) return Error(Err::kInvalidValue, "no such tenant");
  Store(r_->tenants[tenant].total_limit, limit);
  return Status::Ok();
}

uint64_t Ledger::TotalLimit(uint32_t tenant) const {
  if (tenant >= kLedgerMaxTenants || !Load(r_->tenants[tenant].in_use)) return kUnlimited;
  return Load(r_->tenants[tenant].total_limit);
}

uint64_t Ledger::TenantClaimedTotal(uint32_t tenant) const {
  if (tenant >= kLedgerMaxTenants || !Load(r_->tenants[tenant].in_use)) return 0;
  return TenantClaimedAll(r_, tenant);
}

Result<uint32_t> Ledger::OpenSession(uint32_t tenant, uint64_t session_id) {
  if (tenant >= kLedgerMaxTenants) return Error(Err::kInvalidValue, "bad tenant index");
  RegionLock lock(r_);
  if (!r_->tenants[tenant].in_use) return Error(Err::kInvalidValue, "no such tenant");
  for (uint32_t i = 0; i < kLedgerMaxSessions; i++) {
    auto& info = r_->infos[i];
    if (info.in_use) continue;
    std::memset(&r_->sessions[i], 0, sizeof(LedgerSessionRow));
    info.tenant = tenant;
    info.session_id = session_id;
    Store(info.in_use, 1u);
    uint64_t& word = r_->tenants[tenant].slots[i / 64];
    Store(word, Load(word) | (1ull << (i % 64)));
    return i;
  }
  return Error(Err::kMemoryAllocation, "the ledger holds at most {} sessions", kLedgerMaxSessions);
}

std::vector<uint64_t> Ledger::CloseSession(uint32_t slot) {
  std::vector<uint64_t> held(kLedgerMaxGpus, 0);
  if (slot >= kLedgerMaxSessions) return held;
  RegionLock lock(r_);
  auto& info = r_->infos[slot];
  if (!info.in_use) return held;
  const auto& s = r_->sessions[slot];
  for (uint32_t g = 0; g < kLedgerMaxGpus; g++) held[g] = Bounded(Load(s.used[g]));
  // The tenant is the supervisor's own word; checked all the same (no index is used unchecked).
  if (info.tenant < kLedgerMaxTenants) {
    auto& t = r_->tenants[info.tenant];
    Store(t.refused, SaturatingAdd(Load(t.refused), Bounded(Load(s.refused))));
    uint64_t& word = t.slots[slot / 64];
    Store(word, Load(word) & ~(1ull << (slot % 64)));
  }
  Store(info.in_use, 0u);
  return held;
}

Status Ledger::Reserve(uint32_t slot, uint32_t gpu, uint64_t bytes, uint64_t* total_short) {
  if (total_short != nullptr) *total_short = 0;
  if (slot >= kLedgerMaxSessions || gpu >= kLedgerMaxGpus) return Error(Err::kInvalidValue, "bad session or GPU index");
  LedgerSessionRow* s = Writable(slot);
  if (s == nullptr) return Error(Err::kInvalidValue, "session slot {} is not this worker's", slot);
  const LedgerSessionInfo& info = r_->infos[slot];
  if (!Load(info.in_use)) return Error(Err::kDevicesUnavailable, "session is closed");
  uint32_t tenant = Load(info.tenant);
  if (tenant >= kLedgerMaxTenants) return Error(Err::kInvalidValue, "bad tenant index");
  const LedgerTenantRow& t = r_->tenants[tenant];
  std::string_view name(t.name, strnlen(t.name, sizeof(t.name)));
  auto refuse = [&](uint64_t in_use, uint64_t limit) {
    Store(s->refused, Load(s->refused) + 1);
    return Error(Err::kMemoryAllocation, "tenant '{}' memory limit on GPU {} reached: {} in use + {} requested > {} limit",
                 name, gpu, in_use, bytes, limit);
  };
  if (bytes > kMaxReservation) return refuse(TenantClaimed(r_, tenant, gpu), Load(t.limit[gpu]));
  if (uint64_t early = Load(t.limit[gpu]); bytes > early) return refuse(TenantClaimed(r_, tenant, gpu), early);
  // Announce, then read the limits and check everything announced or committed: of two
  // racing reservations, at least one sees the other; and a supervisor that lowers a limit
  // and then sums the claims (SetTotalLimit, TenantClaimedTotal) either sees this one or
  // is seen by it. (This worker's own words, bounded like everyone's.)
  const uint64_t pending = Bounded(Load(s->pending[gpu]));
  Store(s->pending[gpu], pending + bytes);
  uint64_t limit = Load(t.limit[gpu]);
  uint64_t claimed = TenantClaimed(r_, tenant, gpu);
  if (claimed > limit) {
    Store(s->pending[gpu], pending);
    return refuse(claimed - bytes, limit);
  }
  if (uint64_t total_limit = Load(t.total_limit); total_limit != kUnlimited) {
    uint64_t total = TenantClaimedAll(r_, tenant);
    if (total > total_limit) {
      Store(s->pending[gpu], pending);
      Store(s->refused, Load(s->refused) + 1);
      if (total_short != nullptr) *total_short = total - total_limit;
      return Error(Err::kMemoryAllocation,
                   "tenant '{}' has this server's share of its pool-wide limit in use: {} in use + {} requested > {} share",
                   name, total - bytes, bytes, total_limit);
    }
  }
  // Commit before withdrawing the announcement: the bytes are never counted zero times.
  Store(s->used[gpu], Bounded(Load(s->used[gpu])) + bytes);
  Store(s->changes, Load(s->changes) + 1);
  Store(s->pending[gpu], pending);
  return Status::Ok();
}

void Ledger::Release(uint32_t slot, uint32_t gpu, uint64_t bytes) {
  if (slot >= kLedgerMaxSessions || gpu >= kLedgerMaxGpus) return;
  LedgerSessionRow* s = Writable(slot);
  if (s == nullptr || !Load(r_->infos[slot].in_use)) return;
  uint64_t used = Bounded(Load(s->used[gpu]));
  Store(s->used[gpu], bytes > used ? 0 : used - bytes);
  Store(s->changes, Load(s->changes) + 1);
}

void Ledger::SetContextOverhead(uint32_t slot, uint32_t gpu, uint64_t bytes) {
  if (slot >= kLedgerMaxSessions || gpu >= kLedgerMaxGpus) return;
  LedgerSessionRow* s = Writable(slot);
  if (s != nullptr && Load(r_->infos[slot].in_use)) Store(s->overhead[gpu], bytes);
}

TenantUsage Ledger::Tenant(uint32_t tenant, uint32_t gpu) const {
  TenantUsage u;
  if (tenant >= kLedgerMaxTenants || gpu >= kLedgerMaxGpus) return u;
  const auto& t = r_->tenants[tenant];
  if (!Load(t.in_use)) return u;
  u.limit = Load(t.limit[gpu]);
  // A consistent snapshot: a pass in which no slot changed between its first read and the
  // check after the pass (so all values held at once, at the end of the pass).
  struct Seen {
    uint32_t slot;
    uint64_t changes;
  };
  std::vector<Seen> seen;
  for (int attempt = 0; attempt < kSnapshotTries; attempt++) {
    seen.clear();
    TenantUsage pass = u;
    uint64_t refused = Load(t.refused);
    ForEachTenantSlot(r_, tenant, [&](uint32_t slot, const LedgerSessionRow& s) {
      seen.push_back({slot, Load(s.changes)});
      pass.used = SaturatingAdd(pass.used, Bounded(Load(s.used[gpu])));
      pass.context_overhead = SaturatingAdd(pass.context_overhead, Bounded(Load(s.overhead[gpu])));
      refused = SaturatingAdd(refused, Bounded(Load(s.refused)));
      pass.sessions++;
    });
    pass.refused = refused;
    bool stable = true;
    for (const Seen& x : seen) stable &= Load(r_->sessions[x.slot].changes) == x.changes && SlotOfTenant(r_, x.slot, tenant);
    if (stable || attempt == kSnapshotTries - 1) return pass;
  }
  return u;
}

uint64_t Ledger::SessionUsed(uint32_t slot, uint32_t gpu) const {
  if (slot >= kLedgerMaxSessions || gpu >= kLedgerMaxGpus) return 0;
  const LedgerSessionRow& s = own_ != nullptr && slot == own_slot_ ? *own_ : r_->sessions[slot];
  return Load(r_->infos[slot].in_use) ? Bounded(Load(s.used[gpu])) : 0;
}

uint32_t Ledger::SessionTenant(uint32_t slot) const {
  if (slot >= kLedgerMaxSessions) return UINT32_MAX;
  const LedgerSessionInfo& s = r_->infos[slot];
  return Load(s.in_use) ? Load(s.tenant) : UINT32_MAX;
}

uint64_t Ledger::GpuUsed(uint32_t gpu) const {
  if (gpu >= kLedgerMaxGpus) return 0;
  uint64_t sum = 0;
  for (uint32_t t = 0; t < kLedgerMaxTenants; t++)
    if (Load(r_->tenants[t].in_use)) sum = SaturatingAdd(sum, Tenant(t, gpu).used);
  return sum;
}

}  // namespace remora
