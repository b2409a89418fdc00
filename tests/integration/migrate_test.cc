// Planned migration (docs/ARCHITECTURE.md, "Planned migration"): `remoractl session migrate`
// moves a running application's session between two real remora-server processes (host
// backend) while it computes; every result is checked before, during and after, the memory
// it wrote at the start keeps its address and contents, the old server gives the tenant's
// memory back and the new one charges it. A session holding what a migration does not carry
// is refused and goes on where it was. Over shm and tcp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <regex>
#include <string>

#include "tenancy_support.h"

namespace remora::testing {
namespace {

class Migrate : public ::testing::TestWithParam<std::string> {};

uint64_t MemoryUsed(TenancyServer& s, const std::string& tenant) {
  auto admin = s.Admin();
  if (!admin) return ~0ull;
  auto tenants = admin->ListTenants();
  if (!tenants.ok()) return ~0ull;
  for (const auto& t : *tenants)
    if (t.name == tenant) return t.memory_used;
  return ~0ull;
}

std::vector<uint64_t> Sessions(TenancyServer& s) {
  std::vector<uint64_t> ids;
  auto admin = s.Admin();
  if (!admin) return ids;
  auto list = admin->ListSessions();
  if (list.ok())
    for (const auto& x : *list) ids.push_back(x.id);
  return ids;
}

// The number of "iteration N ok" lines the loop printed.
int Checkpoints(BackgroundProcess& app) {
  std::string out = app.Output();
  int n = 0;
  for (size_t at = out.find("iteration "); at != std::string::npos; at = out.find("iteration ", at + 1)) n++;
  return n;
}

TEST_P(Migrate, ASessionMovesMidLoopWithEveryResultChecked) {
  const std::string transport = GetParam();
  TenancyServer a, b;
  ASSERT_TRUE(a.Start(1));
  ASSERT_TRUE(b.Start(1));
  std::string token_a = a.CreateTenant("alice"), token_b = b.CreateTenant("alice");
  std::string stop = a.server.dir() + "/stop-" + transport;
  BackgroundProcess app({BinDir() + "/app_migrate_loop", stop, "8"}, a.Env(transport, token_a));
  ASSERT_TRUE(app.WaitForOutput("ready", 60)) << app.Output();
  ASSERT_TRUE(Eventually([&] { return Checkpoints(app) >= 3; }, 60000)) << app.Output();
  std::vector<uint64_t> on_a = Sessions(a);
  ASSERT_EQ(on_a.size(), 1u);
  // Kept memory, a and b, and the loaded kernel's module image.
  const uint64_t charged = MemoryUsed(a, "alice");
  EXPECT_GT(charged, (8ull << 20) + (2ull << 20));
  EXPECT_LT(charged, (8ull << 20) + (3ull << 20));
  EXPECT_EQ(MemoryUsed(b, "alice"), 0u);

  RunResult r = a.Ctl({"session", "migrate", std::to_string(on_a[0]), "--to", b.server.Url(transport), "--token", token_b});
  EXPECT_EQ(r.exit_code, 0) << r.output << app.Output();
  EXPECT_NE(r.output.find("moved to"), std::string::npos) << r.output;
  EXPECT_TRUE(Eventually([&] { return Sessions(a).empty(); })) << "the old server still has the session";
  EXPECT_EQ(Sessions(b).size(), 1u);
  // The old server gave the tenant's memory back; the new one holds exactly as much.
  EXPECT_TRUE(Eventually([&] { return MemoryUsed(a, "alice") == 0; }));
  EXPECT_EQ(MemoryUsed(b, "alice"), charged);

  // The loop goes on, on the new server, every result checked (the kept memory included).
  int before = Checkpoints(app);
  EXPECT_TRUE(Eventually([&] { return Checkpoints(app) >= before + 3; }, 60000)) << app.Output();
  std::ofstream(stop).put('x');
  EXPECT_EQ(app.Wait(60), 0) << app.Output();
  EXPECT_NE(app.Output().find("PASS migrate_loop"), std::string::npos) << app.Output();
  EXPECT_TRUE(Eventually([&] { return MemoryUsed(b, "alice") == 0; })) << "the new server kept memory after the exit";
  EXPECT_TRUE(Eventually([&] { return Sessions(b).empty(); }));
}

// Stream-ordered memory (cudaMallocAsync) is not carried: the move is refused, the
// administrator hears it did not happen, and the application goes on where it was with
// nothing lost.
TEST_P(Migrate, ASessionHoldingWhatIsNotCarriedStaysWhereItWas) {
  const std::string transport = GetParam();
  TenancyServer a, b;
  ASSERT_TRUE(a.Start(1));
  ASSERT_TRUE(b.Start(1));
  std::string token_a = a.CreateTenant("alice"), token_b = b.CreateTenant("alice");
  std::string stop = a.server.dir() + "/stop-async-" + transport;
  BackgroundProcess app({BinDir() + "/app_migrate_loop", stop, "1", "async"}, a.Env(transport, token_a));
  ASSERT_TRUE(app.WaitForOutput("ready", 60)) << app.Output();
  std::vector<uint64_t> on_a = Sessions(a);
  ASSERT_EQ(on_a.size(), 1u);
  RunResult r = a.Ctl({"session", "migrate", std::to_string(on_a[0]), "--to", b.server.Url(transport), "--token", token_b,
                       "--wait", "3"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("still on this server"), std::string::npos) << r.output;
  EXPECT_EQ(Sessions(a), on_a);
  EXPECT_TRUE(Eventually([&] { return Sessions(b).empty() && MemoryUsed(b, "alice") == 0; }))
      << "the new server kept the refused session's half";
  int before = Checkpoints(app);
  EXPECT_TRUE(Eventually([&] { return Checkpoints(app) >= before + 2; }, 60000)) << app.Output();
  std::ofstream(stop).put('x');
  EXPECT_EQ(app.Wait(60), 0) << app.Output();
  EXPECT_NE(app.Output().find("PASS migrate_loop"), std::string::npos) << app.Output();
}

INSTANTIATE_TEST_SUITE_P(Transports, Migrate, ::testing::Values("shm", "tcp"));

}  // namespace
}  // namespace remora::testing
