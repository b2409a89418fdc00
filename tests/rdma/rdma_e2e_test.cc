// The walking skeleton end to end over rdma://: the real remora-server (host-emulated
// backend) and our CUDA programs through the shim, as tests/integration/skeleton_test.cc does
// for shm:// and tcp:// -- data round trips, CUDA error codes, streams and events, the kernel
// path's plumbing, a client SIGKILLed mid-copy, a server stopped under a client, several
// clients at once; and, as tests/integration/migrate_test.cc, a session moved between two
// servers mid-loop.
//
// Two groups of tests, chosen by where the program runs:
//  - RdmaE2E*: need an RDMA device. Run inside the Soft-RoCE VM (ctest -L rdma:
//    tests/rdma/vm-run.sh sets REMORA_VM_RDMA_ADDR); skipped elsewhere, and a failure inside
//    the VM when it has no RDMA.
//  - NoRdmaDevice*: need a machine WITHOUT an RDMA device (the build/CI host, label
//    integration): remora-server given rdma:// says in one line that it cannot serve it and
//    serves its other transports. Skipped where an RDMA device exists.
//
// Soft-RoCE under QEMU's TCG moves ~15-25 MB/s on the 2-core build machines: app_roundtrip's
// full run (1 B to 64 MiB, six transfers of each size) takes ~30 s there (~50 s on a loaded
// machine) and is kept whole, as over shm and tcp (REMORA_RDMA_E2E_MAX_BYTES caps it). The
// extra client of ManyClientsAtOnce uses app_roundtrip's --max-bytes to stay small.
// app_copy_loop copies 64 MiB per call, so a SIGKILL lands well inside one.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "process_harness.h"
#include "remora/protocol/transport.h"
#include "transport_internal.h"  // RdmaUnavailableReason()

namespace remora::testing {
namespace {

std::string RdmaAddress() {
  for (const char* var : {"REMORA_RDMA_ADDR", "REMORA_VM_RDMA_ADDR"})
    if (const char* v = std::getenv(var); v != nullptr && *v != '\0') return v;
  return "";
}

bool InTheVm() { return std::getenv("REMORA_VM") != nullptr; }

// Skips (outside the VM) or fails (inside it) when there is no RDMA to test on.
#define REQUIRE_RDMA()                                                                                       \
  do {                                                                                                       \
    std::string why = RdmaUnavailableReason();                                                               \
    if (why.empty() && RdmaAddress().empty()) why = "REMORA_RDMA_ADDR is not set";                           \
    if (!why.empty()) {                                                                                      \
      if (InTheVm()) FAIL() << "no RDMA inside the test VM: " << why;                                        \
      GTEST_SKIP() << "no RDMA here (" << why << "); run through tests/rdma/vm-run.sh or ctest -L rdma";     \
    }                                                                                                        \
  } while (0)

#define EXPECT_PASSES(result, name)                                          \
  do {                                                                       \
    RunResult r_ = (result);                                                 \
    EXPECT_EQ(r_.exit_code, 0) << r_.output;                                 \
    EXPECT_NE(r_.output.find("PASS " name), std::string::npos) << r_.output; \
  } while (0)

// Waits until the server's log contains `text` (workers log into it too).
bool LogShows(const ServerProcess& server, const std::string& text, int timeout_s) {
  for (int i = 0; i < timeout_s * 20; i++) {
    if (server.Log().find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return server.Log().find(text) != std::string::npos;
}

// A state directory on a local file system. Inside the VM, REMORA_TEST_TMP (the harness's
// logs, ready files) is on the 9p-shared build tree, where a Unix socket cannot be bound
// (ENXIO): the server's state directory, which holds its admin socket, goes to the guest's
// tmpfs instead. Elsewhere: empty (the harness's default, inside the server's temp dir).
class StateDir {
 public:
  StateDir() {
    if (!InTheVm()) return;
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/remora-state.XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (::mkdtemp(buf.data()) != nullptr) path_ = buf.data();
  }
  ~StateDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  StateDir(const StateDir&) = delete;
  StateDir& operator=(const StateDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

ServerOptions RdmaServerOptions(const StateDir& state) {
  ServerOptions o;
  o.transports = {"rdma"};
  o.rdma_host = RdmaAddress();
  o.host_gpus = 2;
  o.state_dir = state.path();
  return o;
}

// ---- inside the VM: one server for the suite ---------------------------------------------

class RdmaE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!RdmaUnavailableReason().empty() || RdmaAddress().empty()) return;  // SetUp skips or fails
    state_ = new StateDir();
    server_ = new ServerProcess();
    if (!server_->Start(RdmaServerOptions(*state_))) {
      delete server_;
      server_ = nullptr;
    }
  }
  static void TearDownTestSuite() {
    if (server_ != nullptr) {
      EXPECT_EQ(server_->Stop(), 0) << server_->Log();
    }
    delete server_;
    server_ = nullptr;
    delete state_;
    state_ = nullptr;
  }
  void SetUp() override {
    REQUIRE_RDMA();
    ASSERT_NE(server_, nullptr) << "remora-server did not start with --listen rdma://" << RdmaAddress() << ":0";
    url_ = server_->Url("rdma");
    ASSERT_FALSE(url_.empty()) << "no rdma:// URL in the ready file:\n" << server_->Log();
    ASSERT_EQ(url_.rfind("rdma://" + RdmaAddress() + ":", 0), 0u) << url_;
  }
  void TearDown() override {
    if (HasFailure() && server_ != nullptr) std::printf("---- server log ----\n%s----\n", server_->Log().c_str());
  }
  const std::string& url() const { return url_; }

  static StateDir* state_;
  static ServerProcess* server_;
  std::string url_;
};
StateDir* RdmaE2E::state_ = nullptr;
ServerProcess* RdmaE2E::server_ = nullptr;

TEST_F(RdmaE2E, DataRoundTripsByteForByte) {
  // Every size from 1 B to 64 MiB, pageable (staged) and pinned (registered) host memory.
  // REMORA_RDMA_E2E_MAX_BYTES=N (e.g. 16777216, through remora_add_vm_test's ENV) skips the
  // larger sizes on a machine too slow for the 64 MiB case.
  std::vector<std::string> args;
  if (const char* m = std::getenv("REMORA_RDMA_E2E_MAX_BYTES"); m != nullptr && *m != '\0') {
    args = {"--max-bytes", m};
    std::printf("app_roundtrip --max-bytes %s (REMORA_RDMA_E2E_MAX_BYTES)\n", m);
  }
  EXPECT_PASSES(RunApp("app_roundtrip", url(), args, {}, 300), "roundtrip");
}

TEST_F(RdmaE2E, BadCallsGetCudaErrorCodes) { EXPECT_PASSES(RunApp("app_bad_calls", url()), "bad_calls"); }

TEST_F(RdmaE2E, StreamsAndEvents) { EXPECT_PASSES(RunApp("app_streams_events", url()), "streams_events"); }

TEST_F(RdmaE2E, DevicesAndProperties) {
  RunResult r = RunApp("app_device_info", url(), {"2"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("host-emulated"), std::string::npos) << "an emulated device must say so: " << r.output;
}

TEST_F(RdmaE2E, KernelPathPlumbing) {
  // Modules (the fat binary crosses rdma://), launches (not executed on this backend),
  // variables, attributes, occupancy, 2D/3D copies, pools, peer copies and host callbacks.
  EXPECT_PASSES(RunApp("app_plumbing", url(), {}, {}, 300), "plumbing");
}

TEST_F(RdmaE2E, ClientKilledMidCopyLeavesTheServerServing) {
  BackgroundProcess app({BinDir() + "/app_copy_loop"}, ShimEnv(url()));
  // The first 64 MiB round trip takes seconds over Soft-RoCE in the VM.
  ASSERT_TRUE(app.WaitForOutput("copying", 180)) << app.Output();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // well inside the next 64 MiB copy
  app.Kill(SIGKILL);
  EXPECT_EQ(app.Wait(), 128 + SIGKILL);
  EXPECT_TRUE(server_->Alive());
  // The killed session's worker notices (the idle TCP socket's EOF, or the QP's error) and
  // frees what the client left behind.
  EXPECT_TRUE(LogShows(*server_, "released 64 MiB in 1 allocation", 60)) << server_->Log();
  // The next client is served.
  EXPECT_PASSES(RunApp("app_bad_calls", url()), "bad_calls");
}

TEST_F(RdmaE2E, ManyClientsAtOnce) {
  std::vector<std::unique_ptr<BackgroundProcess>> apps;
  for (int i = 0; i < 3; i++)
    apps.push_back(std::make_unique<BackgroundProcess>(std::vector<std::string>{BinDir() + "/app_bad_calls"},
                                                       ShimEnv(url())));
  apps.push_back(std::make_unique<BackgroundProcess>(
      std::vector<std::string>{BinDir() + "/app_roundtrip", "--max-bytes", "2000000"}, ShimEnv(url())));
  for (auto& a : apps) {
    EXPECT_EQ(a->Wait(300), 0) << a->Output();
    EXPECT_NE(a->Output().find("PASS "), std::string::npos) << a->Output();
  }
  EXPECT_TRUE(server_->Alive());
}

// ---- inside the VM: a server of its own, stopped under a client ----------------------------

class RdmaE2EShutdown : public ::testing::Test {
 protected:
  void SetUp() override { REQUIRE_RDMA(); }
  void TearDown() override {
    if (HasFailure()) std::printf("---- server log ----\n%s----\n", server_.Log().c_str());
  }
  StateDir state_;
  ServerProcess server_;
};

TEST_F(RdmaE2EShutdown, SigtermWhileAClientHoldsMemory) {
  ASSERT_TRUE(server_.Start(RdmaServerOptions(state_)));
  std::string url = server_.Url("rdma");
  ASSERT_FALSE(url.empty()) << server_.Log();
  BackgroundProcess app({BinDir() + "/app_hold_memory", "1048576", "120"}, ShimEnv(url));
  ASSERT_TRUE(app.WaitForOutput("holding", 120)) << app.Output();
  EXPECT_EQ(server_.Stop(30), 0) << server_.Log();
  // The application learns its server is gone: its next call fails instead of hanging.
  EXPECT_EQ(app.Wait(60), 1) << app.Output();
  EXPECT_NE(app.Output().find("cudaErrorDevicesUnavailable"), std::string::npos) << app.Output();
}

// ---- inside the VM: planned migration between two servers over rdma ----------------------

// The id of the one session `server` lists (remoractl --json session list), 0 if not exactly one.
uint64_t OnlySession(const ServerProcess& server) {
  RunResult r = Run({BinDir() + "/remoractl", "--state-dir", server.state_dir(), "--json", "session", "list"}, {}, 60);
  size_t at = r.output.find("\"id\":");
  if (r.exit_code != 0 || at == std::string::npos || r.output.find("\"id\":", at + 1) != std::string::npos) return 0;
  return std::strtoull(r.output.c_str() + at + 5, nullptr, 10);
}

// As integration.migrate_test over shm and tcp: app_migrate_loop (1 MiB written at the start,
// 1 MiB copies both ways from and to pinned buffers, a kernel launched, an event, a 4-byte
// copy; every result checked) is moved by `remoractl session migrate` from one rdma:// server
// to another mid-loop and goes on there. Over rdma the pinned buffers were registered with the
// old connection (zero-copy); the move registers them with the new one.
TEST(RdmaE2EMigrate, ASessionMovesBetweenTwoServersMidLoop) {
  REQUIRE_RDMA();
  StateDir state_a, state_b;
  ServerProcess a, b;
  ServerOptions oa = RdmaServerOptions(state_a), ob = RdmaServerOptions(state_b);
  oa.host_gpus = ob.host_gpus = 1;
  ASSERT_TRUE(a.Start(oa));
  ASSERT_TRUE(b.Start(ob));
  std::string stop = a.dir() + "/stop-migrate";
  auto env = ShimEnv(a.Url("rdma"));
  env["REMORA_LOG"] = "info";  // the shim says what the move re-registered
  BackgroundProcess app({BinDir() + "/app_migrate_loop", stop, "1", "pinned"}, env);
  ASSERT_TRUE(app.WaitForOutput("ready", 120)) << app.Output();
  auto checkpoints = [&] {
    std::string out = app.Output();
    int n = 0;
    for (size_t at = out.find("iteration "); at != std::string::npos; at = out.find("iteration ", at + 1)) n++;
    return n;
  };
  auto eventually = [](auto fn, int timeout_s) {
    for (int i = 0; i < timeout_s * 20 && !fn(); i++) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return fn();
  };
  ASSERT_TRUE(eventually([&] { return checkpoints() >= 2; }, 120)) << app.Output();
  uint64_t id = OnlySession(a);
  ASSERT_NE(id, 0u) << "the first server does not list exactly one session";
  RunResult r = remora::testing::Run({BinDir() + "/remoractl", "--state-dir", a.state_dir(), "session", "migrate", std::to_string(id),
                     "--to", b.Url("rdma"), "--wait", "120"},
                    {}, 180);
  EXPECT_EQ(r.exit_code, 0) << r.output << app.Output() << a.Log() << b.Log();
  EXPECT_NE(r.output.find("moved to"), std::string::npos) << r.output;
  EXPECT_TRUE(eventually([&] { return OnlySession(a) == 0 && OnlySession(b) != 0; }, 30)) << "the session did not move";
  // The loop's two pinned buffers, registered with the old connection, are with the new one.
  EXPECT_NE(app.Output().find("2 pinned ranges registered"), std::string::npos) << app.Output();
  // On the new server: more checked rounds (the kept megabyte included), then a clean end.
  int before = checkpoints();
  EXPECT_TRUE(eventually([&] { return checkpoints() >= before + 2; }, 120)) << app.Output();
  { std::ofstream(stop).put('x'); }
  EXPECT_EQ(app.Wait(120), 0) << app.Output();
  EXPECT_NE(app.Output().find("PASS migrate_loop"), std::string::npos) << app.Output();
  EXPECT_EQ(a.Stop(), 0) << a.Log();
  EXPECT_EQ(b.Stop(), 0) << b.Log();
}

// ---- on a machine without RDMA (the build/CI host) -----------------------------------------

TEST(NoRdmaDevice, ServerSaysSoInOneLineAndServesItsOtherTransports) {
  std::string why = RdmaUnavailableReason();
  if (why.empty()) GTEST_SKIP() << "this machine has an RDMA device; the test needs one without";
  ServerProcess server;
  ServerOptions o;
  o.transports = {"rdma", "shm"};
  o.rdma_host = "127.0.0.1";
  ASSERT_TRUE(server.Start(o));
  std::string log = server.Log();
  // One line says that rdma:// is not served, naming the URL and the reason; none says it
  // listens there.
  std::vector<std::string> lines;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);)
    if (line.find("not serving") != std::string::npos || line.find(why) != std::string::npos) lines.push_back(line);
  ASSERT_EQ(lines.size(), 1u) << log;
  EXPECT_NE(lines[0].find("not serving rdma://127.0.0.1:0"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find(why), std::string::npos) << "the reason (" << why << ") is missing: " << lines[0];
  EXPECT_EQ(log.find("listening on rdma://"), std::string::npos) << log;
  // Only the other transport is announced, and it serves.
  EXPECT_TRUE(server.Url("rdma").empty()) << server.Url("rdma");
  ASSERT_FALSE(server.Url("shm").empty()) << log;
  EXPECT_PASSES(RunApp("app_roundtrip", server.Url("shm")), "roundtrip");
  // A client pointed at rdma:// on such a machine gets a CUDA error, not a hang or an abort.
  RunResult r = RunApp("app_device_info", "rdma://127.0.0.1:9", {}, {}, 60);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("cudaErrorNoDevice"), std::string::npos) << r.output;
  EXPECT_TRUE(server.Alive());
  EXPECT_EQ(server.Stop(), 0) << server.Log();
}

}  // namespace
}  // namespace remora::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  // The harness's temporary directories (server state, sockets, logs) go under
  // REMORA_TEST_TMP; inside the VM that is a directory of the shared build tree (the guest's
  // /tmp is a small tmpfs). Create it if it does not exist yet.
  if (const char* t = std::getenv("REMORA_TEST_TMP"); t != nullptr && *t != '\0') {
    std::error_code ec;
    std::filesystem::create_directories(t, ec);
  }
  return RUN_ALL_TESTS();
}
