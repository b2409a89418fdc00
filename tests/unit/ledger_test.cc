// memmgr/: the quota ledger within one process - limits, refusals, sessions, tenants.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstring>

#include "remora/memmgr/ledger.h"

namespace remora {
namespace {

// Shared anonymous memory holding a ledger region (what the supervisor maps).
struct Region {
  Region() {
    mem = ::mmap(nullptr, LedgerRegionBytes(), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(mem, MAP_FAILED);
    std::memset(mem, 0xa5, LedgerRegionBytes());  // "any content" before Create
  }
  ~Region() { ::munmap(mem, LedgerRegionBytes()); }
  void* mem;
};

class LedgerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto l = Ledger::Create(region.mem, LedgerRegionBytes());
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    ledger.emplace(*l);
    auto t = ledger->AddTenant("alpha");
    ASSERT_TRUE(t.ok());
    tenant = *t;
    auto s = ledger->OpenSession(tenant, 1);
    ASSERT_TRUE(s.ok());
    slot = *s;
  }
  Region region;
  std::optional<Ledger> ledger;
  uint32_t tenant = 0, slot = 0;
};

TEST(LedgerRegion, CreateAndAttachValidateTheRegion) {
  Region r;
  EXPECT_FALSE(Ledger::Create(r.mem, LedgerRegionBytes() - 1).ok()) << "too small";
  EXPECT_FALSE(Ledger::Attach(r.mem, LedgerRegionBytes()).ok()) << "not formatted";
  auto created = Ledger::Create(r.mem, LedgerRegionBytes());
  ASSERT_TRUE(created.ok());
  EXPECT_FALSE(Ledger::Attach(r.mem, LedgerRegionBytes() - 1).ok());
  auto attached = Ledger::Attach(r.mem, LedgerRegionBytes());
  ASSERT_TRUE(attached.ok()) << attached.status().ToString();
  // Both views share one state.
  auto t = created->AddTenant("shared");
  ASSERT_TRUE(t.ok());
  auto again = attached->AddTenant("shared");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *t) << "AddTenant of an existing name returns its index";
}

TEST_F(LedgerTest, TenantNamesAndIndices) {
  auto beta = ledger->AddTenant("beta");
  ASSERT_TRUE(beta.ok());
  EXPECT_NE(*beta, tenant);
  EXPECT_EQ(*ledger->AddTenant("alpha"), tenant);
  EXPECT_FALSE(ledger->AddTenant("").ok());
  EXPECT_FALSE(ledger->AddTenant(std::string(64, 'x')).ok());
  EXPECT_TRUE(ledger->AddTenant(std::string(63, 'x')).ok());
}

TEST_F(LedgerTest, UnlimitedByDefault) {
  TenantUsage u = ledger->Tenant(tenant, 0);
  EXPECT_EQ(u.limit, kUnlimited);
  EXPECT_EQ(u.used, 0u);
  EXPECT_EQ(u.sessions, 1u);
  EXPECT_TRUE(ledger->Reserve(slot, 0, 1ull << 50).ok());
  EXPECT_EQ(ledger->Tenant(tenant, 0).used, 1ull << 50);
}

// The limit is exact: reaching it is allowed, one byte more is refused with
// kMemoryAllocation and counted.
TEST_F(LedgerTest, LimitIsExactAndRefusalsAreCounted) {
  ASSERT_TRUE(ledger->SetLimit(tenant, 0, 100).ok());
  EXPECT_TRUE(ledger->Reserve(slot, 0, 60).ok());
  Status over = ledger->Reserve(slot, 0, 41);
  EXPECT_EQ(over.code(), Err::kMemoryAllocation);
  EXPECT_NE(over.message().find("alpha"), std::string::npos) << over.message();
  EXPECT_EQ(ledger->Tenant(tenant, 0).refused, 1u);
  EXPECT_EQ(ledger->Tenant(tenant, 0).used, 60u) << "a refusal charges nothing";
  EXPECT_TRUE(ledger->Reserve(slot, 0, 40).ok()) << "exactly up to the limit";
  EXPECT_EQ(ledger->Reserve(slot, 0, 1).code(), Err::kMemoryAllocation);
  EXPECT_EQ(ledger->Tenant(tenant, 0).refused, 2u);
  ledger->Release(slot, 0, 50);
  EXPECT_EQ(ledger->Tenant(tenant, 0).used, 50u);
  EXPECT_TRUE(ledger->Reserve(slot, 0, 50).ok()) << "freed memory can be used again";
  // Requests that would overflow a naive "used + bytes" are refused, not wrapped.
  EXPECT_EQ(ledger->Reserve(slot, 0, UINT64_MAX).code(), Err::kMemoryAllocation);
  EXPECT_EQ(ledger->Reserve(slot, 0, UINT64_MAX - 10).code(), Err::kMemoryAllocation);
  EXPECT_EQ(ledger->Tenant(tenant, 0).used, 100u);
}

TEST_F(LedgerTest, LimitsArePerGpu) {
  ASSERT_TRUE(ledger->SetLimit(tenant, 0, 100).ok());
  EXPECT_TRUE(ledger->Reserve(slot, 1, 1000).ok()) << "GPU 1 is still unlimited";
  EXPECT_TRUE(ledger->Reserve(slot, 0, 100).ok());
  EXPECT_EQ(ledger->SessionUsed(slot, 0), 100u);
  EXPECT_EQ(ledger->SessionUsed(slot, 1), 1000u);
  EXPECT_EQ(ledger->GpuUsed(1), 1000u);
}

// Lowering a limit below current use keeps what is held but refuses anything new until
// usage drops under the new limit.
TEST_F(LedgerTest, LoweredLimitKeepsExistingRefusesNew) {
  ASSERT_TRUE(ledger->Reserve(slot, 0, 100).ok());
  ASSERT_TRUE(ledger->SetLimit(tenant, 0, 50).ok());
  EXPECT_EQ(ledger->Tenant(tenant, 0).used, 100u);
  EXPECT_EQ(ledger->Reserve(slot, 0, 1).code(), Err::kMemoryAllocation);
  ledger->Release(slot, 0, 60);
  EXPECT_EQ(ledger->Tenant(tenant, 0).used, 40u);
  EXPECT_TRUE(ledger->Reserve(slot, 0, 10).ok());
  EXPECT_EQ(ledger->Reserve(slot, 0, 1).code(), Err::kMemoryAllocation);
}

// The limit is the tenant's, shared by all its sessions; other tenants are independent.
TEST_F(LedgerTest, SessionsShareTheTenantLimit) {
  ASSERT_TRUE(ledger->SetLimit(tenant, 0, 100).ok());
  auto s2 = ledger->OpenSession(tenant, 2);
  ASSERT_TRUE(s2.ok());
  EXPECT_TRUE(ledger->Reserve(slot, 0, 60).ok());
  EXPECT_EQ(ledger->Reserve(*s2, 0, 41).code(), Err::kMemoryAllocation);
  EXPECT_TRUE(ledger->Reserve(*s2, 0, 40).ok());
  EXPECT_EQ(ledger->Tenant(tenant, 0).used, 100u);
  EXPECT_EQ(ledger->Tenant(tenant, 0).sessions, 2u);

  auto beta = ledger->AddTenant("beta");
  ASSERT_TRUE(beta.ok());
  ASSERT_TRUE(ledger->SetLimit(*beta, 0, 10).ok());
  auto sb = ledger->OpenSession(*beta, 3);
  ASSERT_TRUE(sb.ok());
  EXPECT_TRUE(ledger->Reserve(*sb, 0, 10).ok());
  EXPECT_EQ(ledger->SessionTenant(*sb), *beta);
  EXPECT_EQ(ledger->GpuUsed(0), 110u);
}

// Closing a session returns everything it held, and only that.
TEST_F(LedgerTest, CloseSessionReturnsWhatWasHeld) {
  auto s2 = ledger->OpenSession(tenant, 2);
  ASSERT_TRUE(s2.ok());
  ASSERT_TRUE(ledger->Reserve(slot, 0, 70).ok());
  ASSERT_TRUE(ledger->Reserve(slot, 3, 5).ok());
  ASSERT_TRUE(ledger->Reserve(*s2, 0, 30).ok());
  ledger->SetContextOverhead(slot, 0, 500);
  EXPECT_EQ(ledger->Tenant(tenant, 0).context_overhead, 500u);
  EXPECT_EQ(ledger->Tenant(tenant, 0).used, 100u) << "context overhead is reported, not charged";
  std::vector<uint64_t> held = ledger->CloseSession(slot);
  ASSERT_EQ(held.size(), kLedgerMaxGpus);
  EXPECT_EQ(held[0], 70u);
  EXPECT_EQ(held[3], 5u);
  EXPECT_EQ(held[1], 0u);
  EXPECT_EQ(ledger->Tenant(tenant, 0).used, 30u);
  EXPECT_EQ(ledger->Tenant(tenant, 0).context_overhead, 0u);
  EXPECT_EQ(ledger->Tenant(tenant, 0).sessions, 1u);
  EXPECT_EQ(ledger->SessionTenant(slot), UINT32_MAX);
  // A closed slot can no longer charge anything (a late worker call).
  EXPECT_EQ(ledger->Reserve(slot, 0, 1).code(), Err::kDevicesUnavailable);
  std::vector<uint64_t> again = ledger->CloseSession(slot);
  EXPECT_EQ(again[0], 0u) << "closing twice returns nothing the second time";
  EXPECT_EQ(ledger->Tenant(tenant, 0).used, 30u);
}

// Releasing more than held clamps at zero instead of wrapping into a huge charge.
TEST_F(LedgerTest, OverReleaseClampsAtZero) {
  ASSERT_TRUE(ledger->Reserve(slot, 0, 10).ok());
  ledger->Release(slot, 0, 25);
  EXPECT_EQ(ledger->SessionUsed(slot, 0), 0u);
  EXPECT_EQ(ledger->Tenant(tenant, 0).used, 0u);
}

TEST_F(LedgerTest, RemoveTenantRefusedWhileSessionsAreOpen) {
  Status st = ledger->RemoveTenant(tenant);
  EXPECT_EQ(st.code(), Err::kNotPermitted);
  (void)ledger->CloseSession(slot);
  EXPECT_TRUE(ledger->RemoveTenant(tenant).ok());
  EXPECT_FALSE(ledger->OpenSession(tenant, 9).ok()) << "no sessions for a removed tenant";
  EXPECT_FALSE(ledger->SetLimit(tenant, 0, 1).ok());
  // The name can be registered again, starting unlimited.
  auto again = ledger->AddTenant("alpha");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(ledger->Tenant(*again, 0).limit, kUnlimited);
}

TEST_F(LedgerTest, BadIndicesAreRejected) {
  EXPECT_EQ(ledger->SetLimit(kLedgerMaxTenants, 0, 1).code(), Err::kInvalidValue);
  EXPECT_EQ(ledger->SetLimit(tenant, kLedgerMaxGpus, 1).code(), Err::kInvalidValue);
  EXPECT_EQ(ledger->Reserve(kLedgerMaxSessions, 0, 1).code(), Err::kInvalidValue);
  EXPECT_EQ(ledger->Reserve(slot, kLedgerMaxGpus, 1).code(), Err::kInvalidValue);
  EXPECT_FALSE(ledger->OpenSession(kLedgerMaxTenants, 1).ok());
  EXPECT_FALSE(ledger->RemoveTenant(kLedgerMaxTenants).ok());
  ledger->Release(kLedgerMaxSessions, 0, 1);  // ignored, no crash
  EXPECT_EQ(ledger->CloseSession(kLedgerMaxSessions).size(), kLedgerMaxGpus);
  EXPECT_EQ(ledger->SessionUsed(kLedgerMaxSessions, 0), 0u);
  EXPECT_EQ(ledger->GpuUsed(kLedgerMaxGpus), 0u);
}

TEST_F(LedgerTest, CapacityLimitsAreErrors) {
  for (uint32_t i = 1; i < kLedgerMaxSessions; i++) ASSERT_TRUE(ledger->OpenSession(tenant, i + 1).ok()) << i;
  auto full = ledger->OpenSession(tenant, 99999);
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.status().code(), Err::kMemoryAllocation);
  for (uint32_t i = 1; i < kLedgerMaxTenants; i++) ASSERT_TRUE(ledger->AddTenant("t" + std::to_string(i)).ok()) << i;
  EXPECT_FALSE(ledger->AddTenant("one-too-many").ok());
}

// Issue 40, N2: a worker's writable page holds only its own counters; whatever a compromised
// worker writes there (every byte 0xff here) reaches nothing of the supervisor's or another
// tenant's, is bounded while read, and is gone when the slot closes.
TEST_F(LedgerTest, AWorkersPageReachesOnlyItsOwnTenant) {
  auto beta = ledger->AddTenant("beta");
  ASSERT_TRUE(beta.ok());
  ASSERT_TRUE(ledger->SetLimit(*beta, 0, 8 << 20).ok());
  auto other = ledger->OpenSession(*beta, 2);
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE(ledger->Reserve(*other, 0, 1 << 20).ok());
  auto* page = static_cast<unsigned char*>(region.mem) + LedgerSlotOffset(slot);
  std::memset(page, 0xff, LedgerSlotBytes());
  EXPECT_EQ(ledger->SessionTenant(slot), tenant) << "who holds the slot is not on the worker's page";
  EXPECT_EQ(ledger->Tenant(*beta, 0).used, 1u << 20);
  EXPECT_TRUE(ledger->Reserve(*other, 0, 1 << 20).ok());
  TenantUsage junk = ledger->Tenant(tenant, 0);
  EXPECT_LE(junk.used, uint64_t{1} << 50) << "bounded";
  EXPECT_EQ(ledger->GpuUsed(0), junk.used + (2u << 20)) << "sums do not wrap";
  std::vector<uint64_t> held = ledger->CloseSession(slot);
  EXPECT_LE(held[0], uint64_t{1} << 50);
  EXPECT_EQ(ledger->Tenant(tenant, 0).used, 0u);
  EXPECT_EQ(ledger->Tenant(tenant, 0).sessions, 0u);
  EXPECT_EQ(ledger->Tenant(*beta, 0).used, 2u << 20);
  EXPECT_EQ(ledger->Tenant(*beta, 0).sessions, 1u);
  // The slot goes to the next session clean.
  auto again = ledger->OpenSession(tenant, 3);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(ledger->SessionUsed(*again, 0), 0u);
  EXPECT_TRUE(ledger->Reserve(*again, 0, 4096).ok());
  EXPECT_EQ(ledger->Tenant(tenant, 0).used, 4096u);
}

}  // namespace
}  // namespace remora

namespace remora {
namespace {

// A pool's share: the tenant's bytes on all GPUs together (server/pool/).
TEST_F(LedgerTest, TotalLimitCoversAllGpusAndSaysWhatIsMissing) {
  EXPECT_EQ(ledger->TotalLimit(tenant), kUnlimited);
  ASSERT_TRUE(ledger->SetTotalLimit(tenant, 100).ok());
  EXPECT_EQ(ledger->TotalLimit(tenant), 100u);
  uint64_t short_by = 7;
  ASSERT_TRUE(ledger->Reserve(slot, 0, 60, &short_by).ok());
  EXPECT_EQ(short_by, 0u);
  ASSERT_TRUE(ledger->Reserve(slot, 1, 30, &short_by).ok());
  // 90 held on two GPUs: 20 more on a third passes its own (unlimited) GPU limit, not the total.
  Status st = ledger->Reserve(slot, 2, 20, &short_by);
  EXPECT_EQ(st.code(), Err::kMemoryAllocation);
  EXPECT_EQ(short_by, 10u) << st.message();
  EXPECT_NE(st.message().find("pool-wide"), std::string::npos) << st.message();
  EXPECT_EQ(ledger->TenantClaimedTotal(tenant), 90u) << "a refused reservation leaves nothing claimed";
  EXPECT_EQ(ledger->Tenant(tenant, 0).refused, 1u);
  // A per-GPU refusal is not the total's: nothing to borrow.
  ASSERT_TRUE(ledger->SetLimit(tenant, 0, 64).ok());
  EXPECT_FALSE(ledger->Reserve(slot, 0, 5, &short_by).ok());
  EXPECT_EQ(short_by, 0u);
  // Raised (borrowed more): the same reservation passes.
  ASSERT_TRUE(ledger->SetTotalLimit(tenant, 110).ok());
  EXPECT_TRUE(ledger->Reserve(slot, 2, 20, &short_by).ok());
  EXPECT_EQ(ledger->TenantClaimedTotal(tenant), 110u);
  // Lowered below use: new reservations refused, nothing freed.
  ASSERT_TRUE(ledger->SetTotalLimit(tenant, 50).ok());
  EXPECT_FALSE(ledger->Reserve(slot, 3, 1, &short_by).ok());
  EXPECT_EQ(short_by, 61u);
  ledger->Release(slot, 2, 20);
  EXPECT_EQ(ledger->TenantClaimedTotal(tenant), 90u);
  ASSERT_TRUE(ledger->SetTotalLimit(tenant, kUnlimited).ok());
  EXPECT_TRUE(ledger->Reserve(slot, 3, 1000, &short_by).ok());
}

TEST_F(LedgerTest, TotalLimitSpansTheTenantsSessions) {
  auto other = ledger->OpenSession(tenant, 2);
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE(ledger->SetTotalLimit(tenant, 64).ok());
  ASSERT_TRUE(ledger->Reserve(slot, 0, 40).ok());
  uint64_t short_by = 0;
  EXPECT_FALSE(ledger->Reserve(*other, 1, 40, &short_by).ok());
  EXPECT_EQ(short_by, 16u);
  EXPECT_TRUE(ledger->Reserve(*other, 1, 24).ok());
  ledger->CloseSession(slot);
  EXPECT_EQ(ledger->TenantClaimedTotal(tenant), 24u) << "a closed session's bytes return";
}

}  // namespace
}  // namespace remora
