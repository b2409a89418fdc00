// The failure model (docs/ARCHITECTURE.md, "Failure model") with real processes on the
// host-emulated backend: a server that stops answering fails the application's calls within
// the deadline instead of hanging it, long GPU work and idle clients never trip the
// heartbeats, and a client that stops answering has its session ended and its memory freed.
// The deadlines are 2 s on both sides here (default 10 s) to keep CI fast; the bounds checked
// are generous multiples of them, for a loaded 2-core CI machine.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstring>

#include <chrono>
#include <thread>

#include "tenancy_support.h"

namespace remora::testing {
namespace {

constexpr int kDeadlineS = 2;

class Failover : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    s_ = new TenancyServer();
    ASSERT_TRUE(s_->Start(1, "", {"--deadline", std::to_string(kDeadlineS)}));
    token_ = new std::string(s_->CreateTenant("fo"));
  }
  static void TearDownTestSuite() {
    EXPECT_EQ(s_->server.Stop(), 0) << s_->server.Log();
    delete s_;
    delete token_;
  }
  // "tcp_encrypted": tcp with the data path sealed in records (its own receive path).
  std::string Transport() { return GetParam() == "shm" ? "shm" : "tcp"; }
  std::map<std::string, std::string> Env() {
    auto env = s_->Env(Transport(), *token_);
    env["REMORA_DEADLINE_S"] = std::to_string(kDeadlineS);
    if (GetParam() == "tcp_encrypted") env["REMORA_ENCRYPT"] = "on";
    return env;
  }
  // The session of client process `pid` (waits for it to be listed).
  admin::SessionInfo SessionOf(pid_t pid) {
    admin::SessionInfo found;
    auto admin = s_->Admin();
    EXPECT_TRUE(Eventually([&] {
      auto sessions = admin->ListSessions();
      if (!sessions.ok()) return false;
      for (const auto& s : *sessions)
        if (s.client_pid == static_cast<uint32_t>(pid)) found = s;
      return found.id != 0;
    })) << "no session for client " << pid;
    return found;
  }
  // True once the tenant holds no memory and has no session.
  bool TenantIsClear(int timeout_ms) {
    auto admin = s_->Admin();
    return Eventually([&] {
      auto tenants = admin->ListTenants();
      if (!tenants.ok()) return false;
      for (const auto& t : *tenants)
        if (t.name == "fo" && (t.memory_used != 0 || t.sessions != 0)) return false;
      return true;
    }, timeout_ms);
  }

  static TenancyServer* s_;
  static std::string* token_;
};
TenancyServer* Failover::s_ = nullptr;
std::string* Failover::token_ = nullptr;


double SecondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// A stopped worker (a hung server, or a partition) turns the call in flight and the next ones
// into cudaErrorDevicesUnavailable (CUDA_ERROR_DEVICE_UNAVAILABLE = 46 for the driver API)
// within the client's deadline; once the worker runs again it finds its client gone and ends.
TEST_P(Failover, StoppedWorkerFailsCallsWithinTheDeadline) {
  BackgroundProcess app({BinDir() + "/app_liveness", "watch"}, Env());
  ASSERT_TRUE(app.WaitForOutput("ready")) << app.Output();
  admin::SessionInfo session = SessionOf(app.pid());
  ASSERT_GT(session.worker_pid, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // a few synchronisations
  auto stopped = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(session.worker_pid, SIGSTOP), 0);
  bool answered = app.WaitForOutput("driver ", 30);
  double took = SecondsSince(stopped);
  ::kill(session.worker_pid, SIGCONT);
  ASSERT_TRUE(answered) << "the application hung: " << app.Output();
  std::printf("[ %s ] the application's call failed %.2f s after its worker stopped (deadline %d s)\n",
              GetParam().c_str(), took, kDeadlineS);
  EXPECT_NE(app.Output().find("failed cudaErrorDevicesUnavailable"), std::string::npos) << app.Output();
  EXPECT_NE(app.Output().find("next cudaErrorDevicesUnavailable"), std::string::npos) << app.Output();
  EXPECT_NE(app.Output().find("driver 46"), std::string::npos) << app.Output();
  EXPECT_GE(took, kDeadlineS - 0.5);     // not before the deadline...
  EXPECT_LT(took, 3.0 * kDeadlineS + 2);  // ...and not long after it (generous for CI)
  EXPECT_EQ(app.Wait(30), 0) << app.Output();
  EXPECT_TRUE(Eventually([&] { return ParentOf(session.worker_pid) < 0; }, 20000))
      << "the worker outlived its abandoned session";
  EXPECT_TRUE(TenantIsClear(20000)) << s_->Ctl({"usage"}).output;
}

// GPU work longer than both deadlines (a host-backend kernel of 1.25 deadlines, waited for
// synchronously), an application idle as long, and copies queued behind such kernels trip
// neither side.
TEST_P(Failover, LongKernelsAndIdleClientsKeepTheirSession) {
  unsigned us = static_cast<unsigned>(kDeadlineS * 1'250'000);
  RunResult r = RunApp("app_liveness", s_->server.Url(Transport()), {"long", std::to_string(us)}, Env());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("PASS liveness"), std::string::npos) << r.output;
  EXPECT_TRUE(TenantIsClear(20000)) << s_->Ctl({"usage"}).output;
}

// A stopped client (a hung application, or a partition) has its session ended by the worker
// within the server's deadline, and every byte it held returns to the tenant.
TEST_P(Failover, StoppedClientsSessionEndsAndItsMemoryReturns) {
  BackgroundProcess app({BinDir() + "/app_hold_memory", "67108864"}, Env());
  ASSERT_TRUE(app.WaitForOutput("holding")) << app.Output();
  admin::SessionInfo session = SessionOf(app.pid());
  ASSERT_GT(session.worker_pid, 0);
  auto admin = s_->Admin();
  auto before = admin->ListTenants();
  ASSERT_TRUE(before.ok());
  for (const auto& t : *before)
    if (t.name == "fo") {
      EXPECT_GE(t.memory_used, 64u << 20);
    }
  auto stopped = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(app.pid(), SIGSTOP), 0);
  bool ended = Eventually([&] { return ParentOf(session.worker_pid) < 0; }, 30000);
  double took = SecondsSince(stopped);
  bool clear = TenantIsClear(10000);
  ::kill(app.pid(), SIGCONT);
  EXPECT_TRUE(ended) << "the worker still serves a stopped client: " << s_->server.Log();
  std::printf("[ %s ] the worker ended %.2f s after its client stopped (deadline %d s)\n", GetParam().c_str(), took,
              kDeadlineS);
  EXPECT_GE(took, kDeadlineS - 0.5);
  EXPECT_TRUE(clear) << s_->Ctl({"usage"}).output;
  // The application, running again, learns that its session is over.
  EXPECT_EQ(app.Wait(30), 1) << app.Output();
  EXPECT_NE(app.Output().find("cudaErrorDevicesUnavailable"), std::string::npos) << app.Output();
}

// remora-server SIGKILLed with live sessions, then restarted on the same state directory: a
// worker that could end by itself does (its application learns it at once); one that could
// not (stopped) is ended by the new server, which found it in STATE_DIR/workers. No worker
// outlives its application, and the new server's ledger is exact: nothing held, and a new
// session's memory counted.
TEST(SupervisorRestart, WorkersOfAKilledServerEndAndTheLedgerIsExact) {
  TempDir state;
  auto first = std::make_unique<TenancyServer>();
  ASSERT_TRUE(first->Start(1, state.path(), {"--deadline", std::to_string(kDeadlineS)}));
  std::string token = first->CreateTenant("fo");
  auto env = first->Env("shm", token);
  env["REMORA_DEADLINE_S"] = std::to_string(kDeadlineS);
  BackgroundProcess running({BinDir() + "/app_hold_memory", "33554432"}, env);
  BackgroundProcess stuck({BinDir() + "/app_hold_memory", "33554432"}, first->Env("tcp", token));
  ASSERT_TRUE(running.WaitForOutput("holding")) << running.Output();
  ASSERT_TRUE(stuck.WaitForOutput("holding")) << stuck.Output();
  std::vector<pid_t> workers = ChildrenNamed(first->server.pid(), "remora-worker");
  ASSERT_EQ(workers.size(), 2u);
  auto admin = first->Admin();
  auto sessions = admin->ListSessions();
  ASSERT_TRUE(sessions.ok());
  pid_t stuck_worker = 0;
  for (const auto& s : *sessions)
    if (s.client_pid == static_cast<uint32_t>(stuck.pid())) stuck_worker = s.worker_pid;
  ASSERT_GT(stuck_worker, 0);
  admin.reset();
  // A worker that cannot notice its server's death: held in a ptrace stop (a SIGSTOPped
  // worker would not do: it shares the server's process group, which the kernel sends SIGHUP
  // when it is orphaned with stopped members; one stuck in the driver would also do).
  ASSERT_EQ(::ptrace(PTRACE_SEIZE, stuck_worker, nullptr, nullptr), 0) << std::strerror(errno);
  ASSERT_EQ(::ptrace(PTRACE_INTERRUPT, stuck_worker, nullptr, nullptr), 0) << std::strerror(errno);
  int wstatus = 0;
  ASSERT_EQ(::waitpid(stuck_worker, &wstatus, __WALL), stuck_worker);
  ASSERT_EQ(::kill(first->server.pid(), SIGKILL), 0);
  // The worker that runs ends its session by itself: its application fails at once.
  EXPECT_EQ(running.Wait(30), 1) << running.Output();
  EXPECT_NE(running.Output().find("cudaErrorDevicesUnavailable"), std::string::npos) << running.Output();
  EXPECT_GE(ParentOf(stuck_worker), 0) << "the held worker cannot have ended by itself";

  auto second = std::make_unique<TenancyServer>();
  ASSERT_TRUE(second->Start(1, state.path(), {"--deadline", std::to_string(kDeadlineS)}));
  for (pid_t w : workers) EXPECT_LT(ParentOf(w), 0) << "worker " << w << " of the killed server still runs";
  while (::waitpid(stuck_worker, &wstatus, __WALL | WNOHANG) > 0) {
  }  // as its tracer: let it go
  EXPECT_NE(second->server.Log().find("ended 1 session worker(s) of a previous server"), std::string::npos)
      << second->server.Log();
  // Its application (whose server went silent) fails instead of hanging.
  EXPECT_EQ(stuck.Wait(30), 1) << stuck.Output();
  EXPECT_NE(stuck.Output().find("cudaErrorDevicesUnavailable"), std::string::npos) << stuck.Output();
  // The new server counts from nothing, exactly: the tenant (kept in the state database)
  // holds nothing, then what a new session holds.
  auto admin2 = second->Admin();
  auto clear = [&](uint64_t want, uint32_t sessions_want) {
    auto tenants = admin2->ListTenants();
    if (!tenants.ok()) return false;
    for (const auto& t : *tenants)
      if (t.name == "fo") return t.memory_used == want && t.sessions == sessions_want;
    return false;
  };
  EXPECT_TRUE(clear(0, 0)) << second->Ctl({"usage"}).output;
  BackgroundProcess again({BinDir() + "/app_hold_memory", "16777216"}, second->Env("shm", token));
  ASSERT_TRUE(again.WaitForOutput("holding")) << again.Output();
  EXPECT_TRUE(Eventually([&] { return clear(16u << 20, 1); })) << second->Ctl({"usage"}).output;
  again.Kill(SIGKILL);
  EXPECT_TRUE(Eventually([&] { return clear(0, 0); })) << second->Ctl({"usage"}).output;
  EXPECT_EQ(second->server.Stop(), 0) << second->server.Log();
}

INSTANTIATE_TEST_SUITE_P(Transports, Failover, ::testing::Values("shm", "tcp", "tcp_encrypted"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace remora::testing
