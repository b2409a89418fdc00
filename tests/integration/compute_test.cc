// Compute shares with real processes (host-emulated backend): remoractl sets shares, caps
// and priorities that the state store keeps; workers of different tenants running
// app_busy_loop (kernels the emulated backend runs for a given time) get GPU time in
// proportion to their shares; a cap holds alone; GPU time shows in remoractl and /metrics;
// a killed worker's turn goes on. Timing-based checks use wide margins: this is the
// scheduler end to end on a shared CI machine, the exact shares are tested in
// unit.compute_sched_test and on the GPU by tests/gpu/compute-shares.sh.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tenancy_support.h"

namespace remora::testing {
namespace {

constexpr const char* kKernelUs = "2000";

// "kernels N seconds S" of app_busy_loop's output: N / S.
double KernelRate(const std::string& output) {
  size_t k = output.find("kernels ");
  while (k != std::string::npos && !std::isdigit(static_cast<unsigned char>(output[k + 8]))) k = output.find("kernels ", k + 1);
  if (k == std::string::npos) return -1;
  long n = std::atol(output.c_str() + k + 8);
  size_t s = output.find("seconds ", k);
  double secs = s == std::string::npos ? 0 : std::atof(output.c_str() + s + 8);
  return secs > 0 ? static_cast<double>(n) / secs : -1;
}

uint64_t TenantGpuTimeNs(TenancyServer& s, const std::string& tenant) {
  RunResult r = s.Ctl({"--json", "usage", tenant});
  return std::strtoull(JsonField(r.output, "gpu_time_ns", r.output.find("\"tenants\"")).c_str(), nullptr, 10);
}

// Runs app_busy_loop for tenants `a` and `b` at once for `seconds`; returns a's share of the
// GPU time both took (as the workers measured it: what the scheduler divides). Checks that
// both ran, and that a's share of the kernels points the same way.
double RunPair(TenancyServer& s, const std::string& a_name, const std::string& token_a, const std::string& b_name,
               const std::string& token_b, const char* seconds) {
  auto argv = [](const char* secs) {
    return std::vector<std::string>{BinDir() + "/app_busy_loop", secs, kKernelUs, "4"};
  };
  // Both clients connect, then start together: a late start would give the other the GPU
  // alone for a while (work-conserving) and skew the share.
  TempDir dir;
  const std::string gate = dir.path() + "/go";
  auto env = [&](const std::string& token) {
    auto e = s.Env("shm", token);
    e["BUSY_LOOP_GATE"] = gate;
    return e;
  };
  uint64_t ga0 = TenantGpuTimeNs(s, a_name), gb0 = TenantGpuTimeNs(s, b_name);
  BackgroundProcess a(argv(seconds), env(token_a));
  BackgroundProcess b(argv(seconds), env(token_b));
  EXPECT_TRUE(a.WaitForOutput("ready", 120)) << a.Output();
  EXPECT_TRUE(b.WaitForOutput("ready", 120)) << b.Output();
  FILE* go = std::fopen(gate.c_str(), "w");
  EXPECT_NE(go, nullptr) << gate;
  if (go != nullptr) std::fclose(go);
  EXPECT_EQ(a.Wait(120), 0) << a.Output();
  EXPECT_EQ(b.Wait(120), 0) << b.Output();
  double ra = KernelRate(a.Output()), rb = KernelRate(b.Output());
  EXPECT_GT(ra, 0) << a.Output();
  EXPECT_GT(rb, 0) << b.Output();
  double ga = static_cast<double>(TenantGpuTimeNs(s, a_name) - ga0), gb = static_cast<double>(TenantGpuTimeNs(s, b_name) - gb0);
  double share = ga + gb > 0 ? ga / (ga + gb) : -1;
  std::printf("GPU time %.3f s and %.3f s (a's share %.3f); kernels per second %.0f and %.0f (a's share %.3f)\n", ga / 1e9,
              gb / 1e9, share, ra, rb, ra / (ra + rb));
  return share;
}

// A plain HTTP GET of /metrics on 127.0.0.1:port ("" on failure).
std::string Scrape(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
    const char req[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    if (::write(fd, req, sizeof(req) - 1) == static_cast<ssize_t>(sizeof(req) - 1)) {
      char buf[65536];
      ssize_t n;
      while ((n = ::read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
    }
  }
  ::close(fd);
  return out;
}

int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

TEST(Compute, SettingsAreCheckedStoredAndShown) {
  TempDir state;
  {
    TenancyServer s;
    ASSERT_TRUE(s.Start(1, state.path()));
    s.CreateTenant("alice", {"--compute", "30%", "--priority", "high"});
    s.CreateTenant("bob");
    RunResult r = s.Ctl({"--json", "gpu", "list"});
    EXPECT_EQ(JsonField(r.output, "compute_enforced"), "true") << r.output;
    r = s.Ctl({"tenant", "set", "bob", "--compute-max", "50%"});
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("cap 50% of 100 ms"), std::string::npos) << r.output;
    // Bad values are usage errors before anything is asked; nothing changes.
    for (const std::vector<std::string>& bad :
         {std::vector<std::string>{"tenant", "set", "bob", "--compute", "0%"},
          {"tenant", "set", "bob", "--compute", "lots"},
          {"tenant", "set", "bob", "--compute-max", "200000 100000"},
          {"tenant", "set", "bob", "--priority", "urgent"},
          {"tenant", "set", "bob"}}) {
      r = s.Ctl(bad);
      EXPECT_EQ(r.exit_code, 2) << r.output;
      EXPECT_EQ(r.output.rfind("remoractl: ", 0), 0u) << r.output;
    }
    r = s.Ctl({"tenant", "set", "nobody", "--compute", "10%"});
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("no such tenant"), std::string::npos) << r.output;
    r = s.Ctl({"tenant", "list"});
    EXPECT_NE(r.output.find("SHARE"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("30%"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("high"), std::string::npos) << r.output;
  }
  // A restarted server has them (the state store), and applies them.
  TenancyServer s;
  ASSERT_TRUE(s.Start(1, state.path()));
  RunResult r = s.Ctl({"--json", "tenant", "list"});
  size_t alice = r.output.find("\"name\":\"alice\""), bob = r.output.find("\"name\":\"bob\"");
  ASSERT_NE(alice, std::string::npos) << r.output;
  EXPECT_EQ(JsonField(r.output, "weight", alice), "3000") << r.output;
  EXPECT_EQ(JsonField(r.output, "priority", alice), "high");
  EXPECT_EQ(JsonField(r.output, "weight", bob), "100");
  EXPECT_EQ(JsonField(r.output, "quota_us", bob), "50000");
  r = s.Ctl({"--json", "gpu", "list"});
  EXPECT_EQ(JsonField(r.output, "compute_enforced"), "true");
  // Back to nothing set: the GPU is not scheduled any more.
  EXPECT_EQ(s.Ctl({"tenant", "set", "alice", "--compute", "default", "--priority", "normal"}).exit_code, 0);
  EXPECT_EQ(s.Ctl({"tenant", "set", "bob", "--compute-max", "max"}).exit_code, 0);
  r = s.Ctl({"--json", "gpu", "list"});
  EXPECT_EQ(JsonField(r.output, "compute_enforced"), "false") << r.output;
}

// Two tenants busy at once get GPU time in proportion to their shares, the measured GPU time
// agrees (remoractl, /metrics), and new shares apply to the next runs.
TEST(Compute, SharesDivideTheGpu) {
  TenancyServer s;
  int port = FreePort();
  // (The tenant series: to every scraper here; docs/SECURITY.md, N9.)
  ASSERT_TRUE(s.Start(1, "", {"--metrics-listen", "tcp://127.0.0.1:" + std::to_string(port), "--metrics-public-details"}));
  std::string ta = s.CreateTenant("alice", {"--compute", "75%"});
  std::string tb = s.CreateTenant("bob", {"--compute", "25%"});
  double share = RunPair(s, "alice", ta, "bob", tb, "3");
  EXPECT_NEAR(share, 0.75, 0.15);  // unscheduled: 0.5
  std::string metrics = Scrape(port);
  EXPECT_NE(metrics.find("remora_tenant_gpu_time_seconds_total{tenant=\"alice\",gpu=\"0\"} "), std::string::npos) << metrics;
  EXPECT_EQ(metrics.find("remora_tenant_gpu_time_seconds_total{tenant=\"alice\",gpu=\"0\"} 0\n"), std::string::npos);
  EXPECT_NE(metrics.find("remora_gpu_compute_enforced{gpu=\"0\"} 1"), std::string::npos);
  EXPECT_NE(metrics.find("remora_tenant_compute_weight{tenant=\"bob\",priority=\"normal\"} 2500"), std::string::npos);

  // Equal shares now.
  ASSERT_EQ(s.Ctl({"tenant", "set", "bob", "--compute", "75%"}).exit_code, 0);
  share = RunPair(s, "alice", ta, "bob", tb, "2");
  EXPECT_NEAR(share, 0.5, 0.15);
}

// A capped tenant alone stays at its cap (the GPU idles), and a tenant alone without a cap
// gets the GPU whatever its share.
TEST(Compute, CapHoldsAloneAndSharesAreWorkConserving) {
  TenancyServer s;
  ASSERT_TRUE(s.Start(1));
  std::string ta = s.CreateTenant("alice", {"--compute", "10%"});
  std::string tb = s.CreateTenant("bob", {"--compute-max", "25%"});
  RunResult free_run = testing::Run({BinDir() + "/app_busy_loop", "2", kKernelUs, "4"}, s.Env("shm", ta));
  ASSERT_EQ(free_run.exit_code, 0) << free_run.output;
  RunResult capped = testing::Run({BinDir() + "/app_busy_loop", "3", kKernelUs, "4"}, s.Env("shm", tb));
  ASSERT_EQ(capped.exit_code, 0) << capped.output;
  double rf = KernelRate(free_run.output), rc = KernelRate(capped.output);
  std::printf("alone: a 10%% share %.0f kernels/s, a 25%% cap %.0f kernels/s (%.3f of it)\n", rf, rc, rc / rf);
  // Below the cap is not a failure of the cap: the workers measure on the host clock, and a
  // starved CPU makes them see completions late and charge more (docs/ARCHITECTURE.md).
  EXPECT_LT(rc / rf, 0.40) << "the cap must hold";
  EXPECT_GT(rc / rf, 0.08) << "a capped tenant must still run";
  uint64_t gb = TenantGpuTimeNs(s, "bob");
  EXPECT_GT(gb, 3 * 1e9 * 0.10);
  EXPECT_LT(gb, 3 * 1e9 * 0.35) << "GPU time of a 25% cap over 3 s";
}

// Without compute settings nothing is scheduled or measured; a worker killed while it holds
// the GPU does not keep it from the others.
TEST(Compute, OffByDefaultAndADeadWorkersTurnGoesOn) {
  TenancyServer s;
  ASSERT_TRUE(s.Start(1));
  std::string ta = s.CreateTenant("alice");
  std::string tb = s.CreateTenant("bob");
  RunResult r = s.Ctl({"--json", "gpu", "list"});
  EXPECT_EQ(JsonField(r.output, "compute_enforced"), "false") << r.output;
  RunResult plain = testing::Run({BinDir() + "/app_busy_loop", "1", kKernelUs, "4"}, s.Env("shm", ta));
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_EQ(TenantGpuTimeNs(s, "alice"), 0u) << "not measured while off";

  ASSERT_EQ(s.Ctl({"tenant", "set", "alice", "--compute", "50%"}).exit_code, 0);
  BackgroundProcess a({BinDir() + "/app_busy_loop", "60", "20000", "8"}, s.Env("shm", ta));
  ASSERT_TRUE(a.WaitForOutput("running", 60)) << a.Output();
  r = s.Ctl({"--json", "session", "list"});
  int worker = std::atoi(JsonField(r.output, "worker_pid").c_str());
  ASSERT_GT(worker, 0) << r.output;
  BackgroundProcess b({BinDir() + "/app_busy_loop", "2", kKernelUs, "4"}, s.Env("shm", tb));
  ASSERT_TRUE(b.WaitForOutput("running", 60)) << b.Output();
  ::kill(worker, SIGKILL);  // alice's worker dies, perhaps holding the GPU
  EXPECT_EQ(b.Wait(60), 0) << b.Output();
  EXPECT_GT(KernelRate(b.Output()), 0.5 * KernelRate(plain.output)) << b.Output();
  EXPECT_NE(a.Wait(60), 0);
}

}  // namespace
}  // namespace remora::testing
