// memmgr/: the ledger across processes - exact under concurrent reservations from forked
// workers, and usable after a worker is killed at any instant (robust process-shared
// mutex).
#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "remora/base/util.h"
#include "remora/memmgr/ledger.h"

namespace remora {
namespace {

template <typename T>
T* SharedAnon(size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  EXPECT_NE(p, MAP_FAILED);
  return static_cast<T*>(p);
}

// Aborts the whole test binary if a ledger call hangs on a mutex a dead process left
// locked (a robust-mutex regression would otherwise hang until the ctest timeout).
struct Watchdog {
  explicit Watchdog(unsigned seconds) { ::alarm(seconds); }
  ~Watchdog() { ::alarm(0); }
};

struct ChildReport {
  std::atomic<uint64_t> held;     // bytes the child believes it holds
  std::atomic<uint64_t> ops;
  std::atomic<uint64_t> refused;
};

class LedgerProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    mem_ = SharedAnon<void>(LedgerRegionBytes());
    auto l = Ledger::Create(mem_, LedgerRegionBytes());
    ASSERT_TRUE(l.ok());
    ledger_.emplace(*l);
    auto t = ledger_->AddTenant("contended");
    ASSERT_TRUE(t.ok());
    tenant_ = *t;
  }
  void TearDown() override { ::munmap(mem_, LedgerRegionBytes()); }

  void* mem_ = nullptr;
  std::optional<Ledger> ledger_;
  uint32_t tenant_ = 0;
};

// N worker processes reserve and release random sizes against one tenant limit. Sampled
// from outside, the tenant's usage never exceeds the limit; at the end every slot holds
// exactly what its process believes it holds (no lost update), and closing the slots
// returns the tenant to zero.
TEST_F(LedgerProcessTest, ExactUnderConcurrentReservations) {
  constexpr int kChildren = 4;
  constexpr uint64_t kLimit = 1 << 20;
  constexpr auto kRun = std::chrono::milliseconds(400);
  ASSERT_TRUE(ledger_->SetLimit(tenant_, 0, kLimit).ok());
  std::vector<uint32_t> slots;
  for (int i = 0; i < kChildren; i++) {
    auto s = ledger_->OpenSession(tenant_, 100 + i);
    ASSERT_TRUE(s.ok());
    slots.push_back(*s);
  }
  auto* reports = SharedAnon<ChildReport>(sizeof(ChildReport) * kChildren);
  std::vector<pid_t> pids;
  for (int i = 0; i < kChildren; i++) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // A worker: attaches to the region the supervisor formatted.
      auto l = Ledger::Attach(mem_, LedgerRegionBytes());
      if (!l.ok()) ::_exit(10);
      std::mt19937_64 rng(1000 + static_cast<uint64_t>(i));
      std::vector<uint64_t> held;
      uint64_t sum = 0;
      uint64_t end = MonotonicNanos() + std::chrono::nanoseconds(kRun).count();
      while (MonotonicNanos() < end) {
        if (!held.empty() && rng() % 2) {
          size_t k = rng() % held.size();
          l->Release(slots[i], 0, held[k]);
          sum -= held[k];
          held[k] = held.back();
          held.pop_back();
        } else {
          uint64_t bytes = 1 + rng() % (kLimit / 3);
          Status st = l->Reserve(slots[i], 0, bytes);
          if (st.ok()) {
            held.push_back(bytes);
            sum += bytes;
          } else if (st.code() == Err::kMemoryAllocation) {
            reports[i].refused++;
          } else {
            ::_exit(11);
          }
        }
        // Only this process writes its slot: the ledger must agree with it exactly.
        if (l->SessionUsed(slots[i], 0) != sum) ::_exit(12);
        reports[i].held = sum;
        reports[i].ops++;
      }
      ::_exit(0);
    }
    pids.push_back(pid);
  }
  // Sample from the "supervisor" while the workers run.
  uint64_t samples = 0, max_seen = 0;
  auto until = std::chrono::steady_clock::now() + kRun;
  while (std::chrono::steady_clock::now() < until) {
    TenantUsage u = ledger_->Tenant(tenant_, 0);
    max_seen = std::max(max_seen, u.used);
    EXPECT_LE(u.used, kLimit);
    EXPECT_LE(ledger_->GpuUsed(0), kLimit);
    samples++;
  }
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "worker exited with " << (WIFEXITED(status) ? WEXITSTATUS(status) : -1)
        << " (11: unexpected error, 12: ledger disagreed with the worker)";
  }
  uint64_t total_held = 0, ops = 0, refused = 0;
  for (int i = 0; i < kChildren; i++) {
    EXPECT_EQ(ledger_->SessionUsed(slots[i], 0), reports[i].held.load()) << "slot " << i;
    total_held += reports[i].held;
    ops += reports[i].ops;
    refused += reports[i].refused;
  }
  TenantUsage u = ledger_->Tenant(tenant_, 0);
  EXPECT_EQ(u.used, total_held);
  EXPECT_LE(u.used, kLimit);
  EXPECT_EQ(u.refused, refused) << "every refusal is counted once";
  EXPECT_GT(ops, 1000u) << "the workers should have contended for a while";
  EXPECT_GT(refused, 0u) << "the limit should have been hit";
  EXPECT_GT(samples, 10u);
  EXPECT_GT(max_seen, kLimit / 2);
  for (uint32_t s : slots) (void)ledger_->CloseSession(s);
  u = ledger_->Tenant(tenant_, 0);
  EXPECT_EQ(u.used, 0u);
  EXPECT_EQ(u.sessions, 0u);
  ::munmap(reports, sizeof(ChildReport) * kChildren);
}

// A worker killed while it holds the ledger's mutex: the next locker takes over (robust
// mutex, EOWNERDEAD) and the ledger stays usable and consistent.
// The test locks the mutex directly; its offset mirrors ledger.cc's LedgerRegion (magic,
// bytes, then the mutex), and the first two fields are checked to make sure of that.
TEST_F(LedgerProcessTest, WorkerKilledHoldingTheMutex) {
  auto* words = static_cast<uint64_t*>(mem_);
  ASSERT_EQ(words[1], LedgerRegionBytes()) << "LedgerRegion layout changed: update this test";
  auto* mu = reinterpret_cast<pthread_mutex_t*>(static_cast<char*>(mem_) + 16);
  auto slot = ledger_->OpenSession(tenant_, 1);
  ASSERT_TRUE(slot.ok());
  ASSERT_TRUE(ledger_->Reserve(*slot, 0, 4096).ok());

  auto* locked = SharedAnon<std::atomic<int>>(sizeof(std::atomic<int>));
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (pthread_mutex_lock(mu) != 0) ::_exit(1);
    locked->store(1);
    for (;;) ::pause();
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (locked->load() == 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  ASSERT_EQ(locked->load(), 1) << "the child did not take the lock";
  ::kill(pid, SIGKILL);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);

  Watchdog dog(10);
  EXPECT_TRUE(ledger_->Reserve(*slot, 0, 4096).ok()) << "first call after the owner died";
  EXPECT_EQ(ledger_->SessionUsed(*slot, 0), 8192u);
  EXPECT_TRUE(ledger_->Reserve(*slot, 0, 1).ok()) << "the mutex is usable again, not just once";
  EXPECT_EQ(ledger_->Tenant(tenant_, 0).used, 8193u);
  auto held = ledger_->CloseSession(*slot);
  EXPECT_EQ(held[0], 8193u);
  // Another process can lock it normally too.
  pid_t pid2 = ::fork();
  ASSERT_GE(pid2, 0);
  if (pid2 == 0) {
    auto l = Ledger::Attach(mem_, LedgerRegionBytes());
    if (!l.ok()) ::_exit(1);
    auto s = l->OpenSession(tenant_, 2);
    ::_exit(s.ok() && l->Reserve(*s, 0, 1).ok() ? 0 : 2);
  }
  ASSERT_EQ(::waitpid(pid2, &status, 0), pid2);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ::munmap(locked, sizeof(std::atomic<int>));
}

// Workers hammering Reserve/Release (so most of their time is spent inside the lock),
// SIGKILLed at random moments: after each kill the ledger works from this process, and
// the dead worker's slot holds one of the two states its single-store mutations allow.
TEST_F(LedgerProcessTest, WorkersKilledAtRandomMomentsLeaveAUsableLedger) {
  auto own = ledger_->OpenSession(tenant_, 1);
  ASSERT_TRUE(own.ok());
  std::mt19937 rng(4242);
  for (int round = 0; round < 25; round++) {
    auto slot = ledger_->OpenSession(tenant_, 1000 + round);
    ASSERT_TRUE(slot.ok());
    auto* started = SharedAnon<std::atomic<int>>(sizeof(std::atomic<int>));
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto l = Ledger::Attach(mem_, LedgerRegionBytes());
      if (!l.ok()) ::_exit(1);
      started->store(1);
      for (;;) {
        (void)l->Reserve(*slot, 0, 4096);
        l->Release(*slot, 0, 4096);
      }
    }
    while (started->load() == 0) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
    ::kill(pid, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ::munmap(started, sizeof(std::atomic<int>));

    Watchdog dog(10);
    ASSERT_TRUE(ledger_->Reserve(*own, 0, 1).ok()) << "round " << round;
    ledger_->Release(*own, 0, 1);
    uint64_t dead = ledger_->SessionUsed(*slot, 0);
    EXPECT_TRUE(dead == 0 || dead == 4096) << "round " << round << ": " << dead;
    auto held = ledger_->CloseSession(*slot);
    EXPECT_EQ(held[0], dead);
    EXPECT_EQ(ledger_->Tenant(tenant_, 0).used, 0u) << "round " << round;
  }
}

}  // namespace
}  // namespace remora
