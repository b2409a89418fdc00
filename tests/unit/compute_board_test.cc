// The compute board's protocol (turns, queues, hand-overs, dead and unresponsive holders,
// across processes) and the gate's edges, with a fake GPU; the settings' text forms.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <memory>

#include "sched/board.h"
#include "sched/board_region.h"
#include "sched/compute_settings.h"
#include "sched/gate.h"

namespace remora::sched {
namespace {

constexpr uint64_t kT0 = 1'000'000'000;

// A board in shared anonymous memory (so a forked child uses the same one).
class BoardFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    mem_ = ::mmap(nullptr, ComputeBoard::RegionBytes(), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(mem_, MAP_FAILED);
    board_ = std::make_unique<ComputeBoard>(*ComputeBoard::Create(mem_, ComputeBoard::RegionBytes(), tunables_));
    board_->SetEnabled(0, true);
  }
  void TearDown() override {
    board_.reset();
    ::munmap(mem_, ComputeBoard::RegionBytes());
  }
  void Tenant(uint32_t t, uint32_t weight, Priority p = Priority::kNormal) {
    ComputeSettings s;
    s.weight = weight;
    s.priority = p;
    board_->AddTenant(t, s);
  }
  using O = ComputeBoard::Outcome;
  Tunables tunables_;
  void* mem_ = nullptr;
  std::unique_ptr<ComputeBoard> board_;
};

TEST_F(BoardFixture, AttachChecksTheFormat) {
  std::vector<std::byte> junk(ComputeBoard::RegionBytes());
  EXPECT_FALSE(ComputeBoard::Attach(junk.data(), junk.size()).ok());
  EXPECT_TRUE(ComputeBoard::Attach(mem_, ComputeBoard::RegionBytes()).ok());
  EXPECT_FALSE(ComputeBoard::Attach(mem_, 100).ok());
}

TEST_F(BoardFixture, FreeGpuIsGrantedOthersWaitAndGetItOnRelease) {
  Tenant(0, 100);
  Tenant(1, 100);
  board_->OpenSession(3, 0);
  board_->OpenSession(4, 1);
  EXPECT_EQ(board_->Request(0, 3, kT0), O::kGranted);
  EXPECT_EQ(board_->TurnOwner(0), 3u);
  EXPECT_EQ(board_->Request(0, 4, kT0 + 10), O::kWait);
  EXPECT_EQ(board_->Waiting(0), 1u);
  EXPECT_TRUE(board_->Contended(0));
  EXPECT_TRUE(board_->Release(0, 3, kT0 + 20, /*has_work=*/false));
  EXPECT_EQ(board_->TurnOwner(0), 4u);
  EXPECT_EQ(board_->Waiting(0), 0u);
  EXPECT_EQ(board_->SessionState(3, 0), RunState::kIdle);
}

TEST_F(BoardFixture, AnIdleHolderIsPassedOverAtOnce) {
  Tenant(0, 100);
  board_->OpenSession(0, 0);
  board_->OpenSession(1, 0);
  ASSERT_EQ(board_->Request(0, 0, kT0), O::kGranted);
  EXPECT_TRUE(board_->MarkIdle(0, 0));
  EXPECT_EQ(board_->TurnOwner(0), kNoSession) << "an idle holder is nobody's turn";
  EXPECT_EQ(board_->Request(0, 1, kT0 + 5), O::kGranted);
  EXPECT_FALSE(board_->TryActivate(0, 0, kT0 + 6)) << "the old holder lost it";
}

TEST_F(BoardFixture, EndTurnRenewsForTheBestAndDrainsOtherwise) {
  Tenant(0, 100);
  Tenant(1, 100);
  board_->OpenSession(0, 0);
  board_->OpenSession(1, 1);
  ASSERT_EQ(board_->Request(0, 0, kT0), O::kGranted);
  EXPECT_EQ(board_->EndTurn(0, 0, kT0 + 1, 0), O::kRenewed) << "nobody else waits";
  board_->Charge(0, 0, 10'000'000);  // session 0 used 10 ms
  ASSERT_EQ(board_->Request(0, 1, kT0 + 2), O::kWait);
  EXPECT_EQ(board_->EndTurn(0, 0, kT0 + 3, 500), O::kDrain) << "tenant 1 is behind";
  EXPECT_EQ(board_->EndTurn(0, 1, kT0 + 3, 0), O::kLost);
  EXPECT_TRUE(board_->Release(0, 0, kT0 + 4, /*has_work=*/true));
  EXPECT_EQ(board_->TurnOwner(0), 1u);
  EXPECT_EQ(board_->SessionState(0, 0), RunState::kWaiting);
  EXPECT_EQ(board_->TenantUsageNs(0, 0), 10'000'000u);
  EXPECT_EQ(board_->SessionUsageNs(0, 0), 10'000'000u);
}

TEST_F(BoardFixture, AHigherClassAsksTheHolderToYield) {
  Tenant(0, 100, Priority::kLow);
  Tenant(1, 100, Priority::kHigh);
  board_->OpenSession(0, 0);
  board_->OpenSession(1, 1);
  ASSERT_EQ(board_->Request(0, 0, kT0), O::kGranted);
  EXPECT_FALSE(board_->YieldRequested(0));
  EXPECT_EQ(board_->Request(0, 1, kT0 + 1), O::kWait);
  EXPECT_TRUE(board_->YieldRequested(0));
  EXPECT_TRUE(board_->HigherClassPresent(0, 0, kT0 + 2));
  EXPECT_FALSE(board_->HigherClassPresent(0, 1, kT0 + 2));
  EXPECT_FALSE(board_->HigherClassPresent(0, 0, kT0 + 1 + tunables_.presence_ns + 1)) << "presence fades";
}

TEST_F(BoardFixture, AnUnresponsiveHolderLosesItsTurnAfterTheGrace) {
  Tenant(0, 100);
  Tenant(1, 100);
  board_->OpenSession(0, 0);
  board_->OpenSession(1, 1);
  ASSERT_EQ(board_->Request(0, 0, kT0), O::kGranted);
  uint64_t after_turn = kT0 + tunables_.quantum_ns;
  EXPECT_EQ(board_->Request(0, 1, after_turn), O::kWait);
  EXPECT_EQ(board_->Request(0, 1, after_turn + tunables_.hung_grace_ns / 2), O::kWait);
  EXPECT_EQ(board_->Request(0, 1, after_turn + tunables_.hung_grace_ns + 1), O::kGranted);
}

TEST_F(BoardFixture, CappedTenantsAreNotEligibleUntilRefilled) {
  ComputeSettings capped;
  capped.max = ComputeMax{10000, 100000};  // 10 ms per 100 ms
  board_->AddTenant(0, capped);
  board_->OpenSession(0, 0);
  ASSERT_EQ(board_->Request(0, 0, kT0), O::kGranted);
  board_->Charge(0, 0, 12'000'000);  // overshot by 2 ms
  EXPECT_LT(board_->CapTokens(0, 0), 0);
  ASSERT_TRUE(board_->Release(0, 0, kT0 + 1, /*has_work=*/true));
  EXPECT_EQ(board_->TurnOwner(0), kNoSession) << "the GPU idles rather than exceed the cap";
  // 10% of the elapsed time refills: 2 ms of debt plus the 1 ms minimum burst takes 30 ms.
  EXPECT_EQ(board_->Request(0, 0, kT0 + 20'000'000), O::kWait);
  EXPECT_EQ(board_->Request(0, 0, kT0 + 31'000'000), O::kGranted);
}

// A worker process that dies holding the turn: the supervisor's CloseSession hands it over.
TEST_F(BoardFixture, ADeadHoldersTurnIsHandedOverWhenItsSlotCloses) {
  Tenant(0, 100);
  Tenant(1, 100);
  board_->OpenSession(7, 0);
  board_->OpenSession(8, 1);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto b = ComputeBoard::Attach(mem_, ComputeBoard::RegionBytes());
    _exit(b.ok() && b->Request(0, 7, kT0) == O::kGranted ? 0 : 1);  // dies holding it
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(board_->TurnOwner(0), 7u);
  EXPECT_EQ(board_->Request(0, 8, kT0 + 1), O::kWait);
  board_->CloseSession(7, kT0 + 2);
  EXPECT_EQ(board_->TurnOwner(0), 8u);
  EXPECT_EQ(board_->SessionTenant(7), kNoSession);
  EXPECT_EQ(board_->Request(0, 7, kT0 + 3), O::kWait) << "a closed slot gets nothing";
}

// Issue 40, N3: every worker maps the board writable, so each word in it may be junk. Junk
// in every session's tenant word, state and the turn word, out-of-range priorities and
// weights: every decision and query stays inside the board (this test runs under ASan in the
// sanitizer builds), and a real session still gets the GPU.
TEST_F(BoardFixture, JunkInTheBoardIsBoundedEverywhere) {
  Tenant(0, 100);
  board_->OpenSession(3, 0);
  auto* r = static_cast<BoardRegion*>(mem_);
  for (uint32_t s = 0; s < kBoardMaxSessions; s++) {
    if (s == 3) continue;
    r->session_tenant[s].store(0x80000000u + s);
    r->gpus[0].sessions[s].state.store(s % 2 == 0 ? static_cast<uint32_t>(RunState::kWaiting) : 0xdeadbeefu);
  }
  r->session_tenant[5].store(kBoardMaxTenants + 1);   // one past the table
  r->session_tenant[6].store(1);                      // a real tenant, slot not opened
  for (auto& t : r->settings) {
    t.priority.store(0xffffffffu);
    t.weight.store(0);
  }
  r->settings[0].quota_ns.store(1);
  r->settings[0].period_ns.store(0);
  r->gpus[0].waiting.store(0xffffffffu);
  r->gpus[0].turn.store(0xfffeull);  // owner 65533: no such slot
  EXPECT_EQ(board_->TurnOwner(0), kNoSession);
  EXPECT_EQ(board_->SessionTenant(5), kNoSession);
  EXPECT_EQ(board_->SessionTenant(9), kNoSession);
  EXPECT_EQ(board_->TenantPriority(0), Priority::kNormal);
  EXPECT_EQ(board_->CapTokens(0, kNoSession), INT64_MAX);
  EXPECT_FALSE(board_->HigherClassPresent(0, kNoSession, kT0));
  board_->Charge(0, 3, 1000);
  O first = board_->Request(0, 3, kT0);
  EXPECT_TRUE(first == O::kGranted || first == O::kWait);
  (void)board_->EndTurn(0, 3, kT0 + 1, 0);
  (void)board_->Release(0, 3, kT0 + 2, true);
  r->gpus[0].turn.store(4);  // the turn "held" by slot 3 as written by someone else
  board_->CloseSession(3, kT0 + 3);
  board_->CloseSession(6, kT0 + 4);
  // A clean slot and tenant afterwards: the GPU is granted.
  r->settings[0].quota_ns.store(0);
  r->gpus[0].turn.store(0);
  r->gpus[0].waiting.store(0);
  for (uint32_t s = 0; s < kBoardMaxSessions; s++) r->gpus[0].sessions[s].state.store(0);
  board_->OpenSession(10, 0);
  EXPECT_EQ(board_->Request(0, 10, kT0 + 5), O::kGranted);
}

TEST_F(BoardFixture, DisablingAGpuDropsItsTurnsAndQueue) {
  Tenant(0, 100);
  board_->OpenSession(0, 0);
  board_->OpenSession(1, 0);
  ASSERT_EQ(board_->Request(0, 0, kT0), O::kGranted);
  ASSERT_EQ(board_->Request(0, 1, kT0), O::kWait);
  board_->SetEnabled(0, false);
  EXPECT_FALSE(board_->enabled(0));
  EXPECT_EQ(board_->TurnOwner(0), kNoSession);
  EXPECT_EQ(board_->Waiting(0), 0u);
}

// ---- the gate's edges, with a GPU that completes markers when told ------------------------

class FakeGpu final : public MarkerOps {
 public:
  Result<Marker> Record(StreamKey s) override {
    if (capturing.count(s)) return Error(Err::kNotPermitted, "stream is capturing");
    recorded++;
    auto* m = new int(next_++);
    live_[m] = false;
    return static_cast<Marker>(m);
  }
  bool Done(Marker m) override { return live_.at(static_cast<int*>(m)); }
  void Release(Marker m) override {
    live_.erase(static_cast<int*>(m));
    delete static_cast<int*>(m);
    released++;
  }
  void CompleteAll() {
    for (auto& [m, done] : live_) done = true;
  }
  ~FakeGpu() override {
    for (auto& [m, done] : live_) delete m;
  }
  std::map<StreamKey, bool> capturing;
  int recorded = 0, released = 0;
  size_t live() const { return live_.size(); }

 private:
  std::map<int*, bool> live_;
  int next_ = 0;
};

StreamKey S(uintptr_t n) { return reinterpret_cast<StreamKey>(n); }

TEST_F(BoardFixture, GateCostsNothingWhileEnforcementIsOff) {
  board_->SetEnabled(0, false);
  Tenant(0, 100);
  board_->OpenSession(0, 0);
  FakeGpu gpu;
  GpuGate gate(*board_, 0, 0, gpu);
  for (int i = 0; i < 100; i++) {
    ASSERT_TRUE(gate.Admit(kT0 + i));
    gate.Issued(S(1), kT0 + i);
    gate.Poll(kT0 + i);
  }
  EXPECT_FALSE(gate.active());
  EXPECT_EQ(gpu.recorded, 0);
  EXPECT_EQ(board_->SessionUsageNs(0, 0), 0u);
  EXPECT_EQ(gate.MaxWaitNs(), UINT64_MAX);
}

TEST_F(BoardFixture, GateMeasuresUntilItsWorkIsSeenComplete) {
  Tenant(0, 100);
  board_->OpenSession(0, 0);
  FakeGpu gpu;
  GpuGate gate(*board_, 0, 0, gpu);
  ASSERT_TRUE(gate.Admit(kT0));
  gate.Issued(S(1), kT0);
  EXPECT_TRUE(gate.busy());
  gate.Poll(kT0 + 100'000);  // no marker yet: the work is new
  gate.Poll(kT0 + 200'000);  // quiet for 50 us: a marker follows it
  EXPECT_EQ(gpu.recorded, 1);
  gpu.CompleteAll();
  gate.Poll(kT0 + 300'000);
  EXPECT_FALSE(gate.busy());
  EXPECT_EQ(board_->SessionUsageNs(0, 0), 300'000u);
  gate.Poll(kT0 + 900'000);
  EXPECT_EQ(board_->SessionUsageNs(0, 0), 300'000u) << "idle time is not charged";
  EXPECT_EQ(gpu.live(), 0u);
}

TEST_F(BoardFixture, GateCountsAnExecutorsCompletionEvent) {
  Tenant(0, 100);
  board_->OpenSession(0, 0);
  FakeGpu gpu;
  GpuGate gate(*board_, 0, 0, gpu);
  int sync_event = 0;
  ASSERT_TRUE(gate.Admit(kT0));
  gate.Issued(S(1), kT0);
  gate.Covered(S(1), &sync_event);  // a synchronising call's event: no marker needed
  gate.Poll(kT0 + 10'000);
  gate.Released(&sync_event);
  gate.Poll(kT0 + 20'000);
  EXPECT_FALSE(gate.busy());
  EXPECT_EQ(gpu.recorded, 0);
  EXPECT_EQ(board_->SessionUsageNs(0, 0), 20'000u);
}

// A stream that cannot take a marker (captured into a graph, or gone) does not leave the
// session busy forever.
TEST_F(BoardFixture, GateDoesNotHangOnAStreamWithoutMarkers) {
  Tenant(0, 100);
  board_->OpenSession(0, 0);
  FakeGpu gpu;
  gpu.capturing[S(2)] = true;
  GpuGate gate(*board_, 0, 0, gpu);
  ASSERT_TRUE(gate.Admit(kT0));
  gate.Issued(S(2), kT0);
  gate.Poll(kT0 + 100'000);
  gate.Poll(kT0 + 200'000);
  EXPECT_FALSE(gate.busy());
}

TEST_F(BoardFixture, GateRefusesWhileAnotherHoldsTheTurnAndCloseGivesItBack) {
  Tenant(0, 100);
  Tenant(1, 100);
  board_->OpenSession(0, 0);
  board_->OpenSession(1, 1);
  FakeGpu g0, g1;
  GpuGate a(*board_, 0, 0, g0), b(*board_, 0, 1, g1);
  ASSERT_TRUE(a.Admit(kT0));
  a.Issued(S(1), kT0);
  EXPECT_FALSE(b.Admit(kT0 + 1));
  EXPECT_TRUE(b.wants());
  EXPECT_EQ(board_->Waiting(0), 1u);
  a.Close(kT0 + 2);
  EXPECT_EQ(g0.live(), 0u) << "markers given back";
  EXPECT_EQ(board_->TurnOwner(0), 1u);
  EXPECT_TRUE(b.Admit(kT0 + 3));
}

// ---- settings ------------------------------------------------------------------------------

TEST(ComputeSettingsText, Weights) {
  EXPECT_EQ(*ParseWeight("30%"), 3000u);
  EXPECT_EQ(*ParseWeight("12.5%"), 1250u);
  EXPECT_EQ(*ParseWeight("0.01%"), 1u);
  EXPECT_EQ(*ParseWeight("100%"), 10000u);
  EXPECT_EQ(*ParseWeight(" 250\n"), 250u);
  EXPECT_FALSE(ParseWeight("default")->has_value());
  for (const char* bad : {"0%", "101%", "10001", "0", "-5", "abc", "30 %", "1.234%", "", "%"})
    EXPECT_FALSE(ParseWeight(bad).ok()) << bad;
  EXPECT_EQ(FormatShare(3000), "30%");
  EXPECT_EQ(FormatShare(1250), "12.5%");
  EXPECT_EQ(FormatShare(1), "0.01%");
  EXPECT_EQ(FormatWeight(std::nullopt), "100");
}

TEST(ComputeSettingsText, Caps) {
  EXPECT_EQ(**ParseMax("30000 100000"), (ComputeMax{30000, 100000}));
  EXPECT_EQ(**ParseMax("30%"), (ComputeMax{30000, 100000}));
  EXPECT_EQ(**ParseMax("5000 10000\n"), (ComputeMax{5000, 10000}));
  EXPECT_FALSE(ParseMax("max")->has_value());
  EXPECT_FALSE(ParseMax("max 50000")->has_value());
  EXPECT_FALSE(ParseMax("100%")->has_value());
  EXPECT_FALSE(ParseMax("100000 100000")->has_value());
  for (const char* bad : {"0 100000", "200000 100000", "100 10", "30000 2000000", "max 5", "x", "", "30000 100000 1"})
    EXPECT_FALSE(ParseMax(bad).ok()) << bad;
  EXPECT_EQ(FormatMax(ComputeMax{30000, 100000}), "30000 100000");
  EXPECT_EQ(FormatMax(std::nullopt), "max 100000");
  EXPECT_EQ(DescribeMax(ComputeMax{30000, 100000}), "30% of 100 ms");
  EXPECT_EQ(*ParsePriority("high"), Priority::kHigh);
  EXPECT_FALSE(ParsePriority("urgent").ok());
}

}  // namespace
}  // namespace remora::sched
