// Tenants, exact quotas and isolation with real processes (host-emulated backend): quota
// refusals at the exact allocation, concurrent tenants racing for their quotas (with
// SIGKILLed clients), forged pointers rejected by the server, wrong tokens refused, quota
// changes applied to running sessions.
#include <signal.h>
#include <sys/wait.h>

#include "remora.capnp.h"
#include "remora/base/util.h"
#include "remora/protocol/frame.h"
#include "remora/protocol/message.h"
#include "remora/protocol/transport.h"
#include "tenancy_support.h"

namespace remora::testing {
namespace {

constexpr uint64_t kMiB = 1 << 20;

class Tenancy : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(s_.Start()); }
  void TearDown() override { EXPECT_EQ(s_.server.Stop(), 0) << s_.server.Log(); }
  TenancyServer s_;
};

TEST_F(Tenancy, QuotaRefusesTheAllocationThatWouldExceedItAndAFreeMakesRoom) {
  std::string token = s_.CreateTenant("q", {"--memory", "64MiB"});
  for (const char* transport : {"shm", "tcp"}) {
    RunResult r = RunApp("app_quota", s_.server.Url(transport), {"64", "16"}, {{"REMORA_TOKEN", token}});
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("allocation 5 of 16 MiB: cudaErrorMemoryAllocation"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("PASS quota"), std::string::npos) << r.output;
  }
  // The refusals are counted and nothing is left charged.
  auto admin = s_.Admin();
  ASSERT_TRUE(admin);
  auto tenants = admin->ListTenants();
  ASSERT_TRUE(tenants.ok());
  ASSERT_EQ(tenants->size(), 1u);
  EXPECT_EQ((*tenants)[0].memory_used, 0u);
  EXPECT_GE((*tenants)[0].refused, 2u * 2);
  RunResult usage = s_.Ctl({"usage", "q"});
  EXPECT_EQ(usage.exit_code, 0) << usage.output;
  EXPECT_NE(usage.output.find("64 MiB"), std::string::npos) << usage.output;
  EXPECT_NE(usage.output.find("host-emulated"), std::string::npos) << usage.output;
}

// Driver-API physical allocations (cuMemCreate) are charged like any other: with 64 MiB, four
// 16 MiB pieces fit and the fifth is CUDA_ERROR_OUT_OF_MEMORY; releases return everything.
TEST_F(Tenancy, DriverVirtualMemoryIsChargedToTheQuota) {
  std::string token = s_.CreateTenant("v", {"--memory", "64MiB"});
  for (const char* transport : {"shm", "tcp"}) {
    RunResult r = RunApp("app_driver_api", s_.server.Url(transport), {"vmm-quota", "64"}, {{"REMORA_TOKEN", token}});
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("4 made, then CUDA_ERROR_OUT_OF_MEMORY"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("PASS driver_api: vmm-quota 64"), std::string::npos) << r.output;
  }
  auto admin = s_.Admin();
  ASSERT_TRUE(admin);
  auto tenants = admin->ListTenants();
  ASSERT_TRUE(tenants.ok());
  ASSERT_EQ(tenants->size(), 1u);
  EXPECT_EQ((*tenants)[0].memory_used, 0u);
}

TEST_F(Tenancy, WrongOrMissingTokenIsRefused) {
  std::string token = s_.CreateTenant("w");
  std::string forged = token.substr(0, token.rfind('.') + 1) + std::string(43, 'A');
  for (const auto& env : std::vector<std::map<std::string, std::string>>{
           {{"REMORA_TOKEN", forged}}, {{"REMORA_TOKEN", "remora1.nobody." + std::string(43, 'A')}}, {}}) {
    RunResult r = RunApp("app_device_info", s_.server.Url("shm"), {}, env);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find("cudaErrorNoDevice"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("cannot use the Remora server"), std::string::npos) << r.output;
  }
  EXPECT_NE(s_.server.Log().find("refused"), std::string::npos);
  RunResult ok = RunApp("app_device_info", s_.server.Url("tcp"), {"1"}, {{"REMORA_TOKEN", token}});
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
}

TEST_F(Tenancy, ConcurrentTenantsNeverExceedTheirLimitsAndTheLedgerReturnsToZero) {
  const std::map<std::string, uint64_t> limits = {{"ta", 48 * kMiB}, {"tb", 32 * kMiB}};
  std::map<std::string, std::string> tokens;
  for (auto& [name, limit] : limits) tokens[name] = s_.CreateTenant(name, {"--memory", std::to_string(limit >> 20) + "MiB"});
  auto admin = s_.Admin();
  ASSERT_TRUE(admin);

  // Per tenant: two clients that run a fixed number of rounds, and one that storms until it
  // is SIGKILLed while it holds memory.
  std::vector<std::unique_ptr<BackgroundProcess>> finite, victims;
  int seed = 1;
  for (auto& [name, limit] : limits)
    for (int i = 0; i < 3; i++) {
      std::string transport = i % 2 ? "tcp" : "shm";
      (i == 2 ? victims : finite)
          .push_back(std::make_unique<BackgroundProcess>(
              std::vector<std::string>{BinDir() + "/app_alloc_storm", std::to_string(seed++), i == 2 ? "0" : "3000",
                                       std::to_string(12 * kMiB)},
              s_.Env(transport, tokens[name])));
    }
  for (auto* group : {&finite, &victims})
    for (auto& c : *group) ASSERT_TRUE(c->WaitForOutput("storming")) << c->Output();

  // Sample the ledger while they race.
  std::map<std::string, uint64_t> peak;
  int samples = 0;
  auto sample = [&] {
    auto tenants = admin->ListTenants();
    ASSERT_TRUE(tenants.ok()) << tenants.status().ToString();
    for (const auto& t : *tenants) {
      ASSERT_LE(t.memory_used, limits.at(t.name)) << "tenant " << t.name << " is over its limit";
      peak[t.name] = std::max(peak[t.name], t.memory_used);
    }
    samples++;
  };
  auto running = [](BackgroundProcess& c) {
    siginfo_t si = {};
    // WNOWAIT: look without reaping (BackgroundProcess reaps).
    return ::waitid(P_PID, static_cast<id_t>(c.pid()), &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == 0;
  };
  for (bool any = true; any;) {
    ASSERT_NO_FATAL_FAILURE(sample());
    any = false;
    for (auto& c : finite) any |= running(*c);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (auto& c : finite) EXPECT_EQ(c->Wait(30), 0) << c->Output();
  for (int i = 0; i < 50; i++) ASSERT_NO_FATAL_FAILURE(sample());
  auto before = admin->ListTenants();
  ASSERT_TRUE(before.ok());
  for (const auto& t : *before) EXPECT_GT(t.memory_used, 0u) << t.name << "'s storming client holds nothing";
  for (auto& c : victims) {
    ASSERT_TRUE(running(*c)) << c->Output();
    c->Kill(SIGKILL);
    EXPECT_EQ(c->Wait(30), 128 + SIGKILL);
  }
  EXPECT_GT(samples, 20);
  for (auto& [name, limit] : limits) EXPECT_GT(peak[name], limit / 2) << name << " never came near its limit";
  std::printf("%d ledger samples; peaks: ta %s of %s, tb %s of %s\n", samples, FormatSize(peak["ta"]).c_str(),
              FormatSize(limits.at("ta")).c_str(), FormatSize(peak["tb"]).c_str(), FormatSize(limits.at("tb")).c_str());

  // Every byte comes back, also from the killed clients.
  bool zero = Eventually([&] {
    auto tenants = admin->ListTenants();
    if (!tenants.ok()) return false;
    for (const auto& t : *tenants)
      if (t.memory_used != 0 || t.sessions != 0) return false;
    return true;
  });
  EXPECT_TRUE(zero) << s_.Ctl({"usage"}).output;
  auto after = admin->ListTenants();
  ASSERT_TRUE(after.ok());
  for (const auto& t : *after) EXPECT_GT(t.refused, 0u) << t.name << "'s clients never raced at the limit";
  RunResult json = s_.Ctl({"--json", "tenant", "list"});
  EXPECT_NE(json.output.find("\"name\":\"ta\",\"memory_limit\":50331648,\"memory_used\":0"), std::string::npos) << json.output;
  EXPECT_NE(json.output.find("\"name\":\"tb\",\"memory_limit\":33554432,\"memory_used\":0"), std::string::npos) << json.output;
}

// Sends one request over a raw authenticated connection and returns the reply's error.
Err RawCall(Connection& c, uint64_t tag, const std::function<void(wire::Request::Builder&)>& build) {
  ScratchMessage msg;
  auto req = msg.InitRoot<wire::Request>();
  req.setDevice(0);
  req.setThread(1);
  build(req);
  OutFrame f;
  f.kind = FrameKind::kRequest;
  f.flags = kFlagExpectsReply;
  f.tag = tag;
  f.body = msg.Flatten();
  std::vector<std::byte> sink(1 << 16);
  if (!c.Send(f, {}, MutableBytes(sink.data(), sink.size())).ok()) return Err::kUnknown;
  for (;;) {
    auto in = c.Receive(10000);
    if (!in.ok()) return Err::kUnknown;
    bool bulk = in->header.bulk_bytes > 0;
    if (in->kind() != FrameKind::kReply || in->header.tag != tag) {
      if (bulk) (void)c.ReceiveBulk(MutableBytes(sink.data(), in->header.bulk_bytes));
      continue;
    }
    BodyReader body(in->body);
    auto err = static_cast<Err>(body.Root<wire::Reply>().getError());
    if (bulk) (void)c.ReceiveBulk(MutableBytes(sink.data(), in->header.bulk_bytes));
    return err;
  }
}

TEST_F(Tenancy, ForgedPointerEqualToAnotherTenantsAllocationIsRejected) {
  std::string token_a = s_.CreateTenant("fa");
  std::string token_b = s_.CreateTenant("fb");
  MemShell b(s_.server.dir(), s_.Env("shm", token_b));
  ASSERT_TRUE(b.ok());
  std::string alloc = b.Do("alloc 0 1");
  ASSERT_EQ(alloc.rfind("ok 1 0x", 0), 0u) << alloc << b.process().Output();
  std::string ptr_text = alloc.substr(5);
  uint64_t ptr = std::strtoull(ptr_text.c_str(), nullptr, 16);
  ASSERT_EQ(b.Do("check 1"), "ok");

  // At the protocol level: tenant A's worker rejects B's pointer (no shim tables involved).
  auto token = ParseToken(token_a);
  ASSERT_TRUE(token.ok());
  for (const char* transport : {"tcp", "shm"}) {
    auto ep = ParseEndpoint(s_.server.Url(transport));
    ASSERT_TRUE(ep.ok());
    ConnectOptions co;
    co.token = *token;
    auto conn = Connect(*ep, co);
    ASSERT_TRUE(conn.ok()) << conn.status().ToString();
    Connection& c = *conn->connection;
    EXPECT_EQ(RawCall(c, 1, [&](auto& r) { r.initMemFree().setPtr(ptr); }), Err::kInvalidValue);
    EXPECT_EQ(RawCall(c, 2, [&](auto& r) {
                auto m = r.initMemcpyDtoH();
                m.setSrc(ptr);
                m.setSize(256);
              }),
              Err::kInvalidValue);
    EXPECT_EQ(RawCall(c, 3, [&](auto& r) {
                auto m = r.initMemset();
                m.setDst(ptr);
                m.setSize(256);
              }),
              Err::kInvalidValue);
    EXPECT_EQ(RawCall(c, 4, [&](auto& r) { r.initMemFree().setPtr(ptr + 64); }), Err::kInvalidValue);
  }
  // Through the shim, as an application would.
  MemShell a(s_.server.dir(), s_.Env("tcp", token_a));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a.Do("raw " + ptr_text), "raw cudaErrorInvalidValue cudaErrorInvalidValue cudaErrorInvalidValue");
  // B's allocation is untouched and still B's.
  EXPECT_EQ(b.Do("check 1"), "ok");
  EXPECT_EQ(b.Do("free 1"), "ok");
  EXPECT_EQ(a.Do("quit"), "bye");
  EXPECT_EQ(b.Do("quit"), "bye");
}

TEST_F(Tenancy, QuotaChangesApplyToARunningSession) {
  std::string token = s_.CreateTenant("live", {"--memory", "64MiB"});
  MemShell app(s_.server.dir(), s_.Env("shm", token));
  ASSERT_TRUE(app.ok());
  ASSERT_EQ(app.Do("alloc 0 32").substr(0, 4), "ok 1");
  EXPECT_EQ(app.Do("info 0"), "info " + std::to_string(32 * kMiB) + " " + std::to_string(64 * kMiB));

  // Lowering below current use refuses new allocations and frees nothing.
  RunResult r = s_.Ctl({"tenant", "set", "live", "--memory", "16MiB"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(app.Do("alloc 0 1"), "err cudaErrorMemoryAllocation");
  EXPECT_EQ(app.Do("check 1"), "ok");
  EXPECT_EQ(app.Do("info 0"), "info 0 " + std::to_string(16 * kMiB));

  r = s_.Ctl({"tenant", "set", "live", "--memory", "1.5G"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(app.Do("alloc 0 100").substr(0, 4), "ok 2");
  EXPECT_EQ(app.Do("info 0"), "info " + std::to_string(1536 * kMiB - 132 * kMiB) + " " + std::to_string(1536 * kMiB));
  r = s_.Ctl({"tenant", "set", "live", "--memory", "unlimited"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(app.Do("alloc 0 200").substr(0, 4), "ok 3");
  EXPECT_EQ(app.Do("quit"), "bye");
}

}  // namespace
}  // namespace remora::testing
