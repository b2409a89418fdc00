// Planned migration (docs/ARCHITECTURE.md, "Planned migration"): `remoractl session migrate`
// moves a running application's session between two real remora-server processes (host
// backend) while it computes; every result is checked before, during and after, the memory
// it wrote at the start keeps its address and contents, the old server gives the tenant's
// memory back and the new one charges it; stream-ordered memory moves too. A session holding
// what a migration does not carry is refused and goes on where it was. Over shm and tcp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "tenancy_support.h"

namespace remora::testing {
namespace {

// Two servers with tenant alice on each, and app_migrate_loop started on the first.
class Migrate : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(a.Start(1));
    ASSERT_TRUE(b.Start(1));
    token_a = a.CreateTenant("alice");
    token_b = b.CreateTenant("alice");
  }
  // Starts the loop on server a (extra: its arguments after STOPFILE) and waits until it runs.
  void StartLoop(const std::vector<std::string>& extra) {
    stop = a.server.dir() + "/stop-" + std::to_string(++runs) + "-" + GetParam();
    std::vector<std::string> argv = {BinDir() + "/app_migrate_loop", stop};
    argv.insert(argv.end(), extra.begin(), extra.end());
    app = std::make_unique<BackgroundProcess>(argv, a.Env(GetParam(), token_a));
    ASSERT_TRUE(app->WaitForOutput("ready", 60)) << app->Output();
  }
  // The number of "iteration N ok" lines the loop printed.
  int Checkpoints() {
    std::string out = app->Output();
    int n = 0;
    for (size_t at = out.find("iteration "); at != std::string::npos; at = out.find("iteration ", at + 1)) n++;
    return n;
  }
  // Lets the loop run `more` checked rounds, stops it, and expects it to end with PASS.
  void RunsOnAndPasses(int more) {
    int before = Checkpoints();
    EXPECT_TRUE(Eventually([&] { return Checkpoints() >= before + more; }, 60000)) << app->Output();
    std::ofstream(stop).put('x');
    EXPECT_EQ(app->Wait(60), 0) << app->Output();
    EXPECT_NE(app->Output().find("PASS migrate_loop"), std::string::npos) << app->Output();
  }
  RunResult Move(const std::vector<std::string>& extra = {}) {
    std::vector<uint64_t> on_a = a.SessionIds();
    EXPECT_EQ(on_a.size(), 1u);
    // The token from a file: never on a command line (docs/SECURITY.md, N7).
    std::string token_file = a.server.dir() + "/token-b";
    std::ofstream(token_file) << token_b << "\n";
    std::vector<std::string> args = {"session", "migrate", on_a.empty() ? "0" : std::to_string(on_a[0]), "--to",
                                     b.server.Url(GetParam()), "--token-file", token_file};
    args.insert(args.end(), extra.begin(), extra.end());
    return a.Ctl(args);
  }

  TenancyServer a, b;
  std::string token_a, token_b, stop;
  std::unique_ptr<BackgroundProcess> app;
  int runs = 0;
};

TEST_P(Migrate, ASessionMovesMidLoopWithEveryResultChecked) {
  StartLoop({"8"});
  ASSERT_TRUE(Eventually([&] { return Checkpoints() >= 3; }, 60000)) << app->Output();
  // Kept memory, a and b, and the loaded kernel's module image.
  const uint64_t charged = a.MemoryUsed("alice");
  EXPECT_GT(charged, (8ull << 20) + (2ull << 20));
  EXPECT_LT(charged, (8ull << 20) + (3ull << 20));
  EXPECT_EQ(b.MemoryUsed("alice"), 0u);

  RunResult r = Move();
  EXPECT_EQ(r.exit_code, 0) << r.output << app->Output();
  EXPECT_NE(r.output.find("moved to"), std::string::npos) << r.output;
  EXPECT_TRUE(Eventually([&] { return a.SessionIds().empty(); })) << "the old server still has the session";
  EXPECT_EQ(b.SessionIds().size(), 1u);
  // The old server gave the tenant's memory back; the new one holds exactly as much.
  EXPECT_TRUE(Eventually([&] { return a.MemoryUsed("alice") == 0; }));
  EXPECT_EQ(b.MemoryUsed("alice"), charged);

  // The loop goes on, on the new server, every result checked (the kept memory included).
  RunsOnAndPasses(3);
  EXPECT_TRUE(Eventually([&] { return b.MemoryUsed("alice") == 0; })) << "the new server kept memory after the exit";
  EXPECT_TRUE(Eventually([&] { return b.SessionIds().empty(); }));
}

// Stream-ordered memory (cudaMallocAsync from the device's own pool) and that pool move: 1 MiB
// held from the start keeps its address and contents, each iteration allocates and frees more
// in stream order on whichever server it is, the pool's handle still answers with the release
// threshold the loop set (it checks), and the held memory's cudaFreeAsync on the new server
// (placed there: the host backend's pools hold no ranges) gives it back.
TEST_P(Migrate, StreamOrderedMemoryMovesAndIsFreedInStreamOrderThere) {
  StartLoop({"1", "async"});
  ASSERT_TRUE(Eventually([&] { return Checkpoints() >= 2; }, 60000)) << app->Output();
  RunResult r = Move();
  EXPECT_EQ(r.exit_code, 0) << r.output << app->Output();
  EXPECT_TRUE(Eventually([&] { return a.SessionIds().empty() && b.SessionIds().size() == 1; }));
  EXPECT_TRUE(Eventually([&] { return a.MemoryUsed("alice") == 0; })) << "the old server kept memory";
  // Kept, a, b and the held memory (1 MiB each), and at most one per-iteration buffer and the
  // module on top.
  const uint64_t on_b = b.MemoryUsed("alice");
  EXPECT_GE(on_b, 4ull << 20);
  EXPECT_LT(on_b, 6ull << 20);
  RunsOnAndPasses(3);
  const std::string out = app->Output();
  const size_t at = out.find("freed the held memory: ");
  ASSERT_NE(at, std::string::npos) << out;
  EXPECT_GE(std::stoll(out.substr(at + 23)), 1ll << 20) << out;
  EXPECT_TRUE(Eventually([&] { return b.MemoryUsed("alice") == 0; })) << "the new server kept memory after the exit";
}

// Memory of a pool the application created is not carried: the move is refused, the
// administrator hears it did not happen, and the application goes on where it was with
// nothing lost.
TEST_P(Migrate, ASessionHoldingWhatIsNotCarriedStaysWhereItWas) {
  StartLoop({"1", "pool"});
  std::vector<uint64_t> on_a = a.SessionIds();
  RunResult r = Move({"--wait", "30"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  // The administrator hears why, from the application through the old server.
  EXPECT_NE(r.output.find("stays on this server"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("memory pool"), std::string::npos) << r.output;
  EXPECT_EQ(a.SessionIds(), on_a);
  EXPECT_TRUE(Eventually([&] { return b.SessionIds().empty() && b.MemoryUsed("alice") == 0; }))
      << "the new server kept the refused session's half";
  RunsOnAndPasses(2);
}

// The loop's host buffers pinned (cudaMallocHost). Over tcp they are the application's own
// memory and move with it: the session moves. Over shm they are shared with the worker, which
// a move does not carry yet: refused, and the loop goes on where it was.
TEST_P(Migrate, PinnedBuffersMoveOverTcpAndAreRefusedOverShm) {
  StartLoop({"1", "pinned"});
  ASSERT_TRUE(Eventually([&] { return Checkpoints() >= 1; }, 60000)) << app->Output();
  std::vector<uint64_t> on_a = a.SessionIds();
  RunResult r = Move({"--wait", "30"});
  if (GetParam() == "tcp") {
    EXPECT_EQ(r.exit_code, 0) << r.output << app->Output();
    EXPECT_TRUE(Eventually([&] { return a.SessionIds().empty() && b.SessionIds().size() == 1; }));
    RunsOnAndPasses(2);
    EXPECT_TRUE(Eventually([&] { return b.MemoryUsed("alice") == 0; })) << "the new server kept memory after the exit";
  } else {
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("pinned or registered host memory"), std::string::npos) << r.output;
    EXPECT_EQ(a.SessionIds(), on_a);
    EXPECT_TRUE(Eventually([&] { return b.SessionIds().empty() && b.MemoryUsed("alice") == 0; }));
    RunsOnAndPasses(2);
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, Migrate, ::testing::Values("shm", "tcp"));

}  // namespace
}  // namespace remora::testing
