// Issue 40, N2 and N3 (docs/SECURITY.md, "A compromised worker"): the memory a worker shares
// with the supervisor and the other workers - its page of the quota ledger, the compute
// board - is written by a "compromised worker" the way the review did: this test, as root,
// writes into the worker's own read-write shared mappings through /proc/WORKER/mem (only
// memory the worker itself can write), then lets the session end. The supervisor, the other
// tenants' sessions and the ledger must be unaffected.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "sched/board_region.h"
#include "security_support.h"

namespace remora::security {
namespace {

struct Mapping {
  uint64_t start = 0, end = 0, offset = 0;
};

// The worker's shared read-write mappings whose name contains `name` (e.g. "remora-ledger").
std::vector<Mapping> SharedWritable(pid_t pid, const std::string& name) {
  std::vector<Mapping> out;
  std::ifstream in("/proc/" + std::to_string(pid) + "/maps");
  for (std::string line; std::getline(in, line);) {
    if (line.find(name) == std::string::npos) continue;
    std::istringstream f(line);
    std::string range, perms, offset;
    f >> range >> perms >> offset;
    if (perms != "rw-s") continue;
    Mapping m;
    m.start = std::stoull(range.substr(0, range.find('-')), nullptr, 16);
    m.end = std::stoull(range.substr(range.find('-') + 1), nullptr, 16);
    m.offset = std::stoull(offset, nullptr, 16);
    out.push_back(m);
  }
  return out;
}

// Writes `bytes` at `address` of process `pid`, as that process itself could.
bool WriteInto(pid_t pid, uint64_t address, const void* bytes, size_t n) {
  int fd = ::open(("/proc/" + std::to_string(pid) + "/mem").c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t w = ::pwrite(fd, bytes, n, static_cast<off_t>(address));
  ::close(fd);
  return w == static_cast<ssize_t>(n);
}

// The ledger slot the supervisor gave worker `pid` (its --ledger-slot argument).
int LedgerSlotOf(pid_t pid) {
  std::string cmd = ReadFile("/proc/" + std::to_string(pid) + "/cmdline");
  std::vector<std::string> args;
  for (size_t at = 0; at < cmd.size();) {
    size_t z = cmd.find('\0', at);
    if (z == std::string::npos) z = cmd.size();
    args.push_back(cmd.substr(at, z - at));
    at = z + 1;
  }
  for (size_t i = 0; i + 1 < args.size(); i++)
    if (args[i] == "--ledger-slot") return std::atoi(args[i + 1].c_str());
  return -1;
}

class SharedMemoryAttack : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!IsRoot()) GTEST_SKIP() << "writing another process's memory through /proc needs root";
  }
  void Start(std::vector<std::string> extra = {}) {
    ASSERT_TRUE(s_.Start(1, "", std::move(extra)));
    alice_ = s_.CreateTenant("alice", {"--memory", "64MiB"});
    bob_ = s_.CreateTenant("bob", {"--memory", "64MiB"});
  }
  std::unique_ptr<RawSession> Open(const std::string& token) {
    auto r = RawSession::Open(s_.server.Url("shm"), token);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(*r) : nullptr;
  }
  pid_t NewestWorker() {
    auto pids = WorkerPids(s_);
    return pids.empty() ? -1 : pids.back();
  }
  static Err Alloc(RawSession& s, uint64_t size) {
    auto r = s.Call([&](wire::Request::Builder& q) { q.initMemAlloc().setSize(size); });
    return r.ok() ? r->error : Err::kUnknown;
  }
  static uint64_t AllocAt(RawSession& s, uint64_t size) {
    auto r = s.Call([&](wire::Request::Builder& q) { q.initMemAlloc().setSize(size); });
    return r.ok() && r->error == Err::kSuccess ? r->Decode([](wire::Reply::Reader x) { return x.getPointer(); }) : 0;
  }
  // GPU work (a memset, waited for): under --compute-control on it takes a turn on the board.
  static Err Memset(RawSession& s, uint64_t dst, uint64_t size) {
    auto r = s.Call([&](wire::Request::Builder& q) {
      auto m = q.initMemset();
      m.setDst(dst);
      m.setValue(7);
      m.setSize(size);
      m.initStream().setHandle(0);
    });
    return r.ok() ? r->error : Err::kUnknown;
  }
  // Ends a session and waits until the supervisor has reaped its worker.
  void End(std::unique_ptr<RawSession>& s, pid_t worker) {
    s.reset();
    EXPECT_TRUE(Eventually([&] { return ::kill(worker, 0) != 0; }, 15000)) << "the worker did not end";
    EXPECT_TRUE(Eventually([&] { return WorkerPids(s_).size() == 1; }, 15000)) << s_.server.Log();
  }
  // What another tenant sees afterwards: the supervisor alive, its session working, its own
  // usage exact; the attacker's usage back to exactly nothing, and its quota whole.
  void CheckUnaffected(RawSession& bob, uint64_t bob_bytes) {
    ASSERT_TRUE(s_.server.Alive()) << "the supervisor died\n" << s_.server.Log();
    EXPECT_EQ(Alloc(bob, 1 << 20), Err::kSuccess);
    EXPECT_EQ(s_.MemoryUsed("bob"), bob_bytes + (1 << 20));
    EXPECT_EQ(s_.MemoryUsed("alice"), 0u);
    auto again = Open(alice_);
    ASSERT_TRUE(again);
    EXPECT_EQ(Alloc(*again, 48 << 20), Err::kSuccess) << "alice's quota is no longer whole";
    EXPECT_EQ(s_.MemoryUsed("alice"), 48u << 20);
    EXPECT_EQ(Alloc(*again, 32 << 20), Err::kMemoryAllocation) << "alice's quota no longer holds";
  }

  TenancyServer s_;
  std::string alice_, bob_;
};

// N2: the review's ledgerpoke. The worker's writable ledger page held the supervisor's
// `in_use` and `tenant` words; at the session's end the supervisor indexed its tenant table
// with them (0x41414141: a write far outside it, a crash). Now the page holds the worker's
// own counters only, each bounded when read.
TEST_F(SharedMemoryAttack, AWorkersLedgerPageReachesNothingOfTheSupervisor) {
  Start();
  auto bob = Open(bob_);
  ASSERT_TRUE(bob);
  ASSERT_EQ(Alloc(*bob, 1 << 20), Err::kSuccess);
  auto alice = Open(alice_);
  ASSERT_TRUE(alice);
  ASSERT_EQ(Alloc(*alice, 1 << 20), Err::kSuccess);
  pid_t worker = NewestWorker();
  ASSERT_GT(worker, 0);
  std::vector<Mapping> pages = SharedWritable(worker, "remora-ledger");
  ASSERT_EQ(pages.size(), 1u) << ReadFile("/proc/" + std::to_string(worker) + "/maps");
  const Mapping& page = pages[0];
  ASSERT_EQ(page.end - page.start, 4096u);
  // Everything the worker can write: 0x41 bytes over its whole page.
  std::vector<unsigned char> junk(page.end - page.start, 0x41);
  ASSERT_TRUE(WriteInto(worker, page.start, junk.data(), junk.size())) << std::strerror(errno);
  // While it lives, only its own tenant's reading is wrong (bounded); bob's is exact.
  EXPECT_EQ(s_.MemoryUsed("bob"), 1u << 20);
  EXPECT_EQ(Alloc(*bob, 1 << 20), Err::kSuccess);
  EXPECT_EQ(Alloc(*alice, 1 << 20), Err::kMemoryAllocation) << "the junk counts against alice only";
  End(alice, worker);
  CheckUnaffected(*bob, 2 << 20);
}

// N3: the review's boardpoke. Compute-board words used as indices unchecked: the turn owner,
// a waiter's tenant (0x80000000), read by the supervisor when the attacker's session ended
// (a crash, every session gone). Now every value read from the board is bounded.
TEST_F(SharedMemoryAttack, ComputeBoardJunkIsBoundedEverywhere) {
  Start({"--compute-control", "on"});
  auto bob = Open(bob_);
  ASSERT_TRUE(bob);
  uint64_t buf = AllocAt(*bob, 1 << 20);
  ASSERT_NE(buf, 0u);
  ASSERT_EQ(Memset(*bob, buf, 1 << 20), Err::kSuccess);
  auto alice = Open(alice_);
  ASSERT_TRUE(alice);
  pid_t worker = NewestWorker();
  ASSERT_GT(worker, 0);
  // The handshake's answer can come before alice's worker has mapped the board (it sets up
  // its session's shared memory as it starts): wait for the mapping, as long as a start takes.
  std::vector<Mapping> boards = SharedWritable(worker, "remora-compute");
  for (int i = 0; i < 200 && boards.empty(); i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    boards = SharedWritable(worker, "remora-compute");
  }
  ASSERT_EQ(boards.size(), 1u) << ReadFile("/proc/" + std::to_string(worker) + "/maps");
  int slot = LedgerSlotOf(worker);
  ASSERT_GE(slot, 0);
  const uint64_t base = boards[0].start;
  // Offsets in the board's layout (sched/board_region.h), taken from a local instance.
  auto layout = std::make_unique<sched::BoardRegion>();
  auto at = [&](const void* field) {
    return base + static_cast<uint64_t>(static_cast<const char*>(field) - reinterpret_cast<const char*>(layout.get()));
  };
  sched::GpuRow& g0 = layout->gpus[0];
  auto put32 = [&](const void* field, uint32_t v) { return WriteInto(worker, at(field), &v, sizeof(v)); };
  auto put64 = [&](const void* field, uint64_t v) { return WriteInto(worker, at(field), &v, sizeof(v)); };
  // The attacker holds the turn, a waiter of a tenant far outside the table waits, its
  // priority is out of range, and so is the weight of a real tenant.
  ASSERT_TRUE(put64(&g0.turn, static_cast<uint64_t>(slot) + 1));
  ASSERT_TRUE(put32(&g0.waiting, 1));
  ASSERT_TRUE(put32(&g0.sessions[200].state, static_cast<uint32_t>(sched::RunState::kWaiting)));
  ASSERT_TRUE(put32(&layout->session_tenant[200], 0x80000000u));
  ASSERT_TRUE(put32(&g0.sessions[201].state, static_cast<uint32_t>(sched::RunState::kWaiting)));
  ASSERT_TRUE(put32(&layout->session_tenant[201], 1));
  ASSERT_TRUE(put32(&layout->settings[0].priority, 0x7fffffffu));
  ASSERT_TRUE(put32(&layout->settings[0].weight, 0));
  // bob's worker works on the same GPU with the junk in place (it reads the board too).
  EXPECT_EQ(Memset(*bob, buf, 1 << 20), Err::kSuccess);
  End(alice, worker);
  EXPECT_EQ(Memset(*bob, buf, 1 << 20), Err::kSuccess);
  CheckUnaffected(*bob, 1 << 20);
}

}  // namespace
}  // namespace remora::security
