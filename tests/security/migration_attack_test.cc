// Issue 40, N5 and N6 (docs/SECURITY.md): planned migration's two requests a client sends on
// its own - migrateImport (on the target) and migrateFailed (on the source) - and the log
// lines a peer can cause. Real server (host backend), hand-built requests.
#include "remora/protocol/frame_socket.h"
#include "remora/protocol/handshake.h"
#include "security_support.h"

namespace remora::security {
namespace {

constexpr uint64_t kDevice0 = 0x200000000000ull;  // the host backend's GPU 0 (window 0)
constexpr uint64_t kGranule = 2ull << 20;

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = 0; (at = text.find(what, at)) != std::string::npos; at += what.size()) n++;
  return n;
}

class MigrationAttack : public ::testing::Test {
 protected:
  void Start(std::vector<std::string> extra = {}) {
    ASSERT_TRUE(s_.Start(1, "", std::move(extra)));
    tiny_ = s_.CreateTenant("tiny", {"--memory", "1MiB"});
    bob_ = s_.CreateTenant("bob", {"--memory", "64MiB"});
  }
  std::unique_ptr<RawSession> Open(const std::string& token, const std::string& transport = "shm") {
    auto r = RawSession::Open(s_.server.Url(transport), token);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? std::move(*r) : nullptr;
  }
  // migrateImport of allocations {address, size} on device 0.
  static Result<RawReply> Import(RawSession& s, const std::vector<std::pair<uint64_t, uint64_t>>& allocations) {
    return s.Call([&](wire::Request::Builder& q) {
      auto m = q.initMigrateImport();
      auto al = m.initAllocations(static_cast<unsigned>(allocations.size()));
      for (unsigned i = 0; i < al.size(); i++) {
        al[i].setPtr(allocations[i].first);
        al[i].setSize(allocations[i].second);
        al[i].setOrdinal(0);
      }
    });
  }
  static Err Free(RawSession& s, uint64_t p) {
    auto r = s.Call([&](wire::Request::Builder& q) { q.initMemFree().setPtr(p); });
    return r.ok() ? r->error : Err::kUnknown;
  }

  TenancyServer s_;
  std::string tiny_, bob_;
};

// The review's migimport: no migration ordered, a fresh session of a 1 MiB tenant imports
// 2048 allocations of 1 byte, 2 MiB apart. Charged 2 KiB, it would hold 4 GiB on a GPU (a
// placement maps whole 2 MiB granules). Now a placement is charged what it holds, and a
// session takes one import.
TEST_F(MigrationAttack, ImportsAreChargedWhatThePlacementHolds) {
  Start();
  auto tiny = Open(tiny_);
  ASSERT_TRUE(tiny);
  std::vector<std::pair<uint64_t, uint64_t>> spread;
  for (uint64_t i = 0; i < 2048; i++) spread.emplace_back(kDevice0 + i * kGranule, 1);
  auto r = Import(*tiny, spread);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->error, Err::kMemoryAllocation) << "2048 granules for a 1 MiB tenant: " << r->message;
  EXPECT_EQ(s_.MemoryUsed("tiny"), 0u);
  // bob (64 MiB): three allocations sharing one granule are charged the granule; freed, it
  // is all returned; a second import in the same session is refused.
  auto bob = Open(bob_);
  ASSERT_TRUE(bob);
  std::vector<std::pair<uint64_t, uint64_t>> packed = {{kDevice0, 4096}, {kDevice0 + 8192, 4096}, {kDevice0 + 65536, 512}};
  r = Import(*bob, packed);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->error, Err::kSuccess) << r->message;
  EXPECT_EQ(s_.MemoryUsed("bob"), kGranule);
  r = Import(*bob, {{kDevice0 + 8 * kGranule, 4096}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->error, Err::kInvalidValue) << "a second import: " << r->message;
  for (const auto& [at, size] : packed) EXPECT_EQ(Free(*bob, at), Err::kSuccess);
  EXPECT_TRUE(Eventually([&] { return s_.MemoryUsed("bob") == 0; }, 5000)) << s_.MemoryUsed("bob");
  // 32 allocations in 32 granules: 64 MiB, bob's whole quota, is what they hold.
  auto bob2 = Open(bob_);
  ASSERT_TRUE(bob2);
  std::vector<std::pair<uint64_t, uint64_t>> full;
  for (uint64_t i = 0; i < 33; i++) full.emplace_back(kDevice0 + i * kGranule, 1);
  r = Import(*bob2, full);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->error, Err::kMemoryAllocation) << "33 granules > 64 MiB";
}

// The review's log amplification: 100,000 migrateFailed posts with no migration pending
// logged 200,000 lines (worker and supervisor). Only the answer to an order is taken - once.
TEST_F(MigrationAttack, FailureReportsNobodyOrderedAreNotLogged) {
  Start();
  auto s = Open(bob_);
  ASSERT_TRUE(s);
  std::string why(600, 'x');
  for (int i = 0; i < 100000; i++)
    ASSERT_TRUE(s->Post([&](wire::Request::Builder& q) { q.setMigrateFailed(why); }).ok());
  auto ping = s->Call([](wire::Request::Builder& q) { q.setPing(); }, {}, 0, 120000);
  ASSERT_TRUE(ping.ok());
  std::string log = s_.server.Log();
  size_t lines = Count(log, "did not move") + Count(log, "nobody ordered");
  std::printf("100,000 unasked failure reports: %zu log lines, log %zu bytes\n", lines, log.size());
  EXPECT_LE(lines, 40u);
  EXPECT_EQ(Count(log, "did not move"), 0u);
  // An order: its answer is taken, once.
  auto ids = s_.SessionIds();
  ASSERT_EQ(ids.size(), 1u);
  testing::BackgroundProcess ctl({testing::BinDir() + "/remoractl", "--state-dir", s_.server.state_dir(), "session",
                                  "migrate", std::to_string(ids[0]), "--to", "tcp://127.0.0.1:9", "--wait", "60"},
                                 {});
  ASSERT_TRUE(Eventually([&] { return s_.server.Log().find("moves it to tcp://127.0.0.1:9") != std::string::npos; }));
  ASSERT_TRUE(Eventually([&] { return Count(s_.server.Log(), "moves it to tcp://127.0.0.1:9") >= 2; }))
      << "the worker got the order";
  ASSERT_TRUE(s->Post([&](wire::Request::Builder& q) { q.setMigrateFailed("the first answer"); }).ok());
  ASSERT_TRUE(s->Post([&](wire::Request::Builder& q) { q.setMigrateFailed("a second answer"); }).ok());
  EXPECT_NE(ctl.Wait(60), 0);
  EXPECT_NE(ctl.Output().find("the first answer"), std::string::npos) << ctl.Output();
  ASSERT_TRUE(s->Call([](wire::Request::Builder& q) { q.setPing(); }).ok());
  log = s_.server.Log();
  EXPECT_EQ(Count(log, "did not move: the first answer"), 2u) << "the worker's line and the supervisor's\n" << log;
  EXPECT_EQ(Count(log, "did not move: a second answer"), 0u) << log;
}

// Unauthenticated data connections with a forged proof: each was a WARN line (8.5k lines/s in
// the review). Now within the same kind of budget as refused handshakes.
TEST_F(MigrationAttack, RefusedDataConnectionsAreLoggedWithinABudget) {
  Start({"--tcp-streams", "2"});
  uint16_t port = ParseEndpoint(s_.server.Url("tcp"))->port;
  SessionInfo forged;
  forged.session_id = 424242;
  int refused = 0;
  for (int i = 0; i < 2000; i++) {
    Fd sock = TcpConnectForTest(port);
    FrameSocket fs(sock.get());
    if (RunDataHello(fs, forged, 0, 5000).code() == Err::kNoDevice) refused++;
  }
  EXPECT_EQ(refused, 2000);
  size_t lines = Count(s_.server.Log(), "tcp data connection from");
  std::printf("2000 forged data connections: %zu log lines\n", lines);
  EXPECT_GE(lines, 1u);
  EXPECT_LE(lines, 40u);
}

}  // namespace
}  // namespace remora::security
