// NCCL through Remora (docs/ARCHITECTURE.md, "NCCL"): a C program of four ranks, each a process
// and a session of its own, two on each of two real remora-server processes (host backend,
// NCCL emulated across the workers), over shm and tcp: init by unique id, every collective and a
// send/recv ring in a group, results checked (blocking communicators over shm, non-blocking ones
// over tcp); NCCL's buffers charged to the tenant while the communicators live and returned
// after; ncclCommInitAll in one process; another tenant given the id, and a forged id, are
// refused; a killed rank, and a stopped one, make the others' calls fail (ncclRemoteError)
// within the deadline, and nothing hangs.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "tenancy_support.h"

namespace remora::testing {
namespace {

int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

std::map<std::string, std::string> AppEnv(const std::string& url) {
  auto env = ShimEnv(url);
  // Remora's libnccl.so.2 first, as remora-run preloads it.
  std::string dir = ShimPath().substr(0, ShimPath().rfind('/'));
  env["LD_PRELOAD"] += ":" + dir + "/libnccl.so.2";
  return env;
}

// Two servers of one cluster: peer links between them on the cluster key.
struct Cluster {
  TempDir dir;  // the key file; outlives the servers
  TenancyServer a, b;
  std::string key_file;
  bool Start(double deadline_s) {
    key_file = dir.path() + "/cluster.key";
    {
      std::ofstream k(key_file);
      k << "remora-test-cluster-key-0123456789abcdef0123456789abcdef\n";
    }
    ::chmod(key_file.c_str(), 0600);
    int pa = FreePort(), pb = FreePort();
    auto args = [&](int mine, int theirs) {
      return std::vector<std::string>{"--deadline", std::to_string(deadline_s), "--peer-listen",
                                      "tcp://127.0.0.1:" + std::to_string(mine), "--peer", "127.0.0.1:" + std::to_string(theirs),
                                      "--peer-key-file", key_file};
    };
    return a.Start(2, "", args(pa, pb)) && b.Start(2, "", args(pb, pa));
  }
  // Tenant alice on both servers, and the environment of app_nccl_ranks's four ranks over
  // transport `t`: ranks 0 and 1 on server a, 2 and 3 on server b.
  std::map<std::string, std::string> FourRanks(const std::string& t) {
    std::string ta = a.CreateTenant("alice", {"--gpus", "0,1"}), tb = b.CreateTenant("alice", {"--gpus", "0,1"});
    std::string ua = a.server.Url(t), ub = b.server.Url(t);
    auto env = AppEnv(ua);
    env["NCCL_TEST_SERVERS"] = ua + "," + ua + "," + ub + "," + ub;
    env["NCCL_TEST_TOKENS"] = ta + "," + ta + "," + tb + "," + tb;
    return env;
  }
};

class Nccl : public ::testing::TestWithParam<std::string> {};

TEST_P(Nccl, FourRanksOnTwoServersRunEveryCollectiveAndTheirBuffersAreCharged) {
  const std::string t = GetParam();
  Cluster c;
  ASSERT_TRUE(c.Start(10));
  auto env = c.FourRanks(t);
  std::string hold = c.dir.path() + "/go";
  env["NCCL_TEST_HOLD"] = hold;
  if (t == "tcp") env["NCCL_TEST_NONBLOCKING"] = "1";  // config.blocking = 0: ncclInProgress, polled
  BackgroundProcess app({BinDir() + "/app_nccl_ranks", "collectives", "4"}, env);
  for (int r = 0; r < 4; r++)
    ASSERT_TRUE(app.WaitForOutput("rank " + std::to_string(r) + " holding", 120)) << app.Output() << c.a.server.Log();
  // Each rank holds its 1 MiB and its communicator's buffers (the emulation's: 1 MiB and 2 MiB
  // for each of the 3 other ranks), charged by its server: two ranks per server.
  EXPECT_EQ(c.a.MemoryUsed("alice"), 2 * (1ull << 20) + 2 * (7ull << 20));
  EXPECT_EQ(c.b.MemoryUsed("alice"), 2 * (1ull << 20) + 2 * (7ull << 20));
  { std::ofstream(hold) << "go\n"; }
  EXPECT_EQ(app.Wait(120), 0) << app.Output();
  std::string out = app.Output();
  EXPECT_NE(out.find("all ranks passed"), std::string::npos) << out;
  for (const char* check : {"all-reduce ok", "reduction operators ok", "broadcast and reduce ok",
                            "all-gather, reduce-scatter and all-to-all ok", "gather and scatter ok", "send/recv group ok",
                            "split ok"})
    for (int r = 0; r < 4; r++)
      EXPECT_NE(out.find("rank " + std::to_string(r) + ": " + check), std::string::npos) << check << "\n" << out;
  EXPECT_TRUE(Eventually([&] { return c.a.MemoryUsed("alice") == 0 && c.b.MemoryUsed("alice") == 0; }))
      << "returned: " << c.a.MemoryUsed("alice") << " " << c.b.MemoryUsed("alice");
}

TEST_P(Nccl, InitAllMakesOneCommunicatorPerDeviceOfOneProcess) {
  TenancyServer s;
  ASSERT_TRUE(s.Start(2));
  std::string alice = s.CreateTenant("alice", {"--gpus", "0,1"});
  auto env = AppEnv(s.server.Url(GetParam()));
  env["REMORA_TOKEN"] = alice;
  RunResult r = testing::Run({BinDir() + "/app_nccl_ranks", "all"}, env, 120);
  EXPECT_EQ(r.exit_code, 0) << r.output << s.server.Log();
  EXPECT_NE(r.output.find("all: ncclCommInitAll and a grouped all-reduce ok"), std::string::npos) << r.output;
  EXPECT_TRUE(Eventually([&] { return s.MemoryUsed("alice") == 0; }));
}

TEST_P(Nccl, AnotherTenantGivenTheIdAndAForgedIdAreRefused) {
  const std::string t = GetParam();
  TenancyServer s;
  ASSERT_TRUE(s.Start(2));
  std::string alice = s.CreateTenant("alice", {"--gpus", "0,1"}), bob = s.CreateTenant("bob", {"--gpus", "0,1"});
  auto env = AppEnv(s.server.Url(t));
  env["NCCL_TEST_SERVERS"] = s.server.Url(t) + "," + s.server.Url(t);
  env["NCCL_TEST_TOKENS"] = alice + "," + bob;
  RunResult r = testing::Run({BinDir() + "/app_nccl_ranks", "foreign"}, env, 120);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("foreign: refused, forged: refused"), std::string::npos) << r.output;
  std::string log = s.server.Log();
  EXPECT_NE(log.find("belongs to another tenant"), std::string::npos) << log;
  EXPECT_NE(log.find("nonce does not match"), std::string::npos) << log;
}

// NCCL 2.28's device API (the emulation's values): every host function served by the server,
// out-pointers re-aimed at the caller's structs, forged windows and device communicators and
// cyclic or over-long requirement lists refused (tests/apps/nccl_device.cc).
TEST_P(Nccl, DeviceApiIsServedAndForgedHandlesAreRefused) {
  TenancyServer s;
  ASSERT_TRUE(s.Start(2));
  std::string alice = s.CreateTenant("alice", {"--gpus", "0,1"});
  auto env = AppEnv(s.server.Url(GetParam()));
  env["REMORA_TOKEN"] = alice;
  RunResult r = testing::Run({BinDir() + "/app_nccl_device"}, env, 120);
  EXPECT_EQ(r.exit_code, 0) << r.output << s.server.Log();
  for (const char* check : {"teams ok", "requirements ok", "device communicator ok", "refusals ok"})
    for (int rank = 0; rank < 2; rank++)
      EXPECT_NE(r.output.find("rank " + std::to_string(rank) + ": " + check), std::string::npos) << check << "\n" << r.output;
  EXPECT_NE(r.output.find("device api ok"), std::string::npos) << r.output;
  EXPECT_TRUE(Eventually([&] { return s.MemoryUsed("alice") == 0; })) << s.MemoryUsed("alice");
}

// A rank that goes (killed, or stopped until its server's deadline ends its session): every
// other rank's pending all-reduce fails with ncclRemoteError within the deadline, its stream
// drains, and the servers give all the memory back.
void LostRank(const std::string& t, const std::string& how, double within) {
  Cluster c;
  ASSERT_TRUE(c.Start(2));
  auto env = c.FourRanks(t);
  env["NCCL_TEST_WITHIN"] = std::to_string(within);
  env["REMORA_DEADLINE_S"] = "2";
  RunResult r = testing::Run({BinDir() + "/app_nccl_ranks", how, "4"}, env, 180);
  for (size_t at = r.output.find("lost rank seen"); at != std::string::npos; at = r.output.find("lost rank seen", at + 1))
    std::cout << "  " << r.output.substr(at, r.output.find('\n', at) - at) << "\n";  // the times, in the test's log
  EXPECT_EQ(r.exit_code, 0) << r.output << c.a.server.Log() << c.b.server.Log();
  for (int rank = 0; rank < 3; rank++)
    EXPECT_NE(r.output.find("rank " + std::to_string(rank) + ": lost rank seen after"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("remote process exited"), std::string::npos) << r.output;
  EXPECT_TRUE(Eventually([&] { return c.a.MemoryUsed("alice") == 0 && c.b.MemoryUsed("alice") == 0; }, 15000))
      << "left charged: " << c.a.MemoryUsed("alice") << " " << c.b.MemoryUsed("alice");
}

TEST_P(Nccl, AKilledRankFailsTheOthersWithinTheDeadline) { LostRank(GetParam(), "kill", 5); }
TEST_P(Nccl, AStoppedRankFailsTheOthersWithinTheDeadline) { LostRank(GetParam(), "stop", 2 + 4); }

// A server lost (its supervisor and workers killed) while the ranks of both servers wait in an
// all-reduce: the ranks on the other server fail with ncclRemoteError (the peer link to it is
// down), the one on the lost server with ncclSystemError; nothing hangs.
TEST_P(Nccl, ALostServerFailsTheOtherServersRanks) {
  const std::string t = GetParam();
  Cluster c;
  ASSERT_TRUE(c.Start(2));
  auto env = c.FourRanks(t);
  env["NCCL_TEST_WITHIN"] = "10";
  env["REMORA_DEADLINE_S"] = "2";
  BackgroundProcess app({BinDir() + "/app_nccl_ranks", "lostserver", "4"}, env);
  for (const char* line : {"rank 0: waiting", "rank 1: waiting", "rank 2: waiting", "rank 3: holding back"})
    ASSERT_TRUE(app.WaitForOutput(line, 60)) << line << "\n" << app.Output();
  std::vector<pid_t> workers = ChildrenNamed(c.b.server.pid(), "remora-worker");
  ::kill(c.b.server.pid(), SIGKILL);
  for (pid_t w : workers) ::kill(w, SIGKILL);
  EXPECT_EQ(app.Wait(90), 0) << app.Output() << c.a.server.Log();
  std::string out = app.Output();
  for (size_t at = out.find("lost rank seen"); at != std::string::npos; at = out.find("lost rank seen", at + 1))
    std::cout << "  " << out.substr(at, out.find('\n', at) - at) << "\n";
  for (const char* rank : {"rank 0: lost rank seen", "rank 1: lost rank seen"}) {
    size_t at = out.find(rank);
    ASSERT_NE(at, std::string::npos) << out;
    EXPECT_NE(out.substr(at, out.find('\n', at) - at).find("remote process exited"), std::string::npos) << out;
  }
  size_t at = out.find("rank 2: lost rank seen");
  ASSERT_NE(at, std::string::npos) << out;
  EXPECT_NE(out.substr(at, out.find('\n', at) - at).find("system error"), std::string::npos) << out;
  EXPECT_TRUE(Eventually([&] { return c.a.MemoryUsed("alice") == 0; }, 15000)) << c.a.MemoryUsed("alice");
}

INSTANTIATE_TEST_SUITE_P(Transports, Nccl, ::testing::Values("shm", "tcp"));

}  // namespace
}  // namespace remora::testing
