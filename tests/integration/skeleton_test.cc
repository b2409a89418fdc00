// The walking skeleton end to end: our CUDA programs through the shim against a real
// remora-server (host-emulated backend) over each transport.
#include <gtest/gtest.h>
#include <signal.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "process_harness.h"
#include "remora/protocol/transport.h"

namespace remora::testing {
namespace {

class Skeleton : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    server_ = new ServerProcess();
    ServerOptions o;
    o.host_gpus = 2;
    ASSERT_TRUE(server_->Start(o));
  }
  static void TearDownTestSuite() {
    EXPECT_EQ(server_->Stop(), 0) << server_->Log();
    delete server_;
  }
  std::string url() { return server_->Url(GetParam()); }
  static ServerProcess* server_;
};
ServerProcess* Skeleton::server_ = nullptr;

#define EXPECT_PASSES(result, name)                                  \
  do {                                                               \
    RunResult r_ = (result);                                         \
    EXPECT_EQ(r_.exit_code, 0) << r_.output;                         \
    EXPECT_NE(r_.output.find("PASS " name), std::string::npos) << r_.output; \
  } while (0)

TEST_P(Skeleton, DataRoundTripsByteForByte) { EXPECT_PASSES(RunApp("app_roundtrip", url()), "roundtrip"); }

TEST_P(Skeleton, BadCallsGetCudaErrorCodes) { EXPECT_PASSES(RunApp("app_bad_calls", url()), "bad_calls"); }

TEST_P(Skeleton, StreamsAndEvents) { EXPECT_PASSES(RunApp("app_streams_events", url()), "streams_events"); }
// The generated runtime entries (protocol/api/cudart.api), end to end through the shim.
TEST_P(Skeleton, GeneratedRuntimeEntries) { EXPECT_PASSES(RunApp("gpu_runtime_api", url()), "runtime_api"); }
// The driver API through the libcuda.so.1 facade: devices, contexts across threads, streams,
// events, fatbin and PTX modules, the JIT linker, virtual memory management.
TEST_P(Skeleton, DriverApiProgram) { EXPECT_PASSES(RunApp("app_driver_api", url()), "driver_api"); }

// Host functions interleaved with staged copies: the worker must keep reading (the client's
// callbackDone is behind the copies) and copies must read pinned memory in stream order.
TEST_P(Skeleton, HostCallbacksKeepStreamOrderWithCopies) {
  EXPECT_PASSES(RunApp("app_callback_order", url()), "callback_order");
}

// Stream capture on the worker's streams and graphs replayed with the host data changed
// between launches (pageable memory through staging, pinned memory shared over shm).
TEST_P(Skeleton, CapturedCopiesAndMemsetsReplay100Times) { EXPECT_PASSES(RunApp("app_graphs", url(), {"100"}), "graphs"); }

// Graph semantics NVIDIA's cuda-samples rely on (issue 43): the first small copy into pageable
// memory inside a capture, host nodes seeing their graph's staged copies from the first
// launch (by hand, by capture, a clone), cudaMallocAsync/cudaFreeAsync in a capture as
// allocation and free nodes, conditional nodes of every kind by hand and by capture
// (cudaStreamEndCapture(stream, NULL) of a capture into a graph).
TEST_P(Skeleton, GraphSemanticsOfTheCudaSamples) { EXPECT_PASSES(RunApp("gpu_graph_semantics", url()), "graph_semantics"); }

// Managed memory the host writes, copied, read back (coherence at launches and
// synchronisations), a __managed__ variable, mapped pinned memory.
TEST_P(Skeleton, ManagedMemoryWrittenOnTheHostCopiedAndReadBack) { EXPECT_PASSES(RunApp("app_managed", url()), "managed"); }

// cudaMemcpyBatchAsync, cudaMemcpy3DBatchAsync, cudaMemcpy3DPeer[Async] (two host GPUs).
TEST_P(Skeleton, BatchedAndPeer3DCopies) { EXPECT_PASSES(RunApp("app_copy_batch", url()), "copy_batch"); }

// CUDA_VISIBLE_DEVICES among the session's two devices, for the runtime and the driver API
// alike; NVML lists both whatever it says (as NVML does), with the same UUIDs.
TEST_P(Skeleton, CudaVisibleDevicesSelectsAmongTheSessionsDevices) {
  auto line = [](const std::string& out, const std::string& what) {
    size_t at = out.find("\n" + what + " ");
    if (at == std::string::npos && out.rfind(what + " ", 0) == 0) at = 0;
    else if (at != std::string::npos) at++;
    if (at == std::string::npos) return std::string("(no " + what + " line)");
    return out.substr(at, out.find('\n', at) - at);
  };
  auto run = [&](const char* value) {
    std::map<std::string, std::string> env;
    if (value != nullptr) env["CUDA_VISIBLE_DEVICES"] = value;
    RunResult r = RunApp("app_visible_devices", url(), {}, env);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return r.output;
  };
  std::string all = run(nullptr);
  std::string nvml = line(all, "nvml");
  ASSERT_EQ(nvml.rfind("nvml 2 GPU-", 0), 0u) << all;
  std::string a = nvml.substr(7, nvml.find(' ', 7) - 7), b = nvml.substr(nvml.rfind(' ') + 1);
  ASSERT_NE(a, b);
  EXPECT_EQ(line(all, "runtime"), "runtime 2 cudaSuccess " + a + " " + b) << all;
  EXPECT_EQ(line(all, "driver"), "driver 2 CUDA_SUCCESS " + a + " " + b) << all;
  // The server GPU each ordinal's memory comes from (host backend: its address region).
  std::string region_a = line(all, "alloc 0").substr(8), region_b = line(all, "alloc 1").substr(8);
  ASSERT_NE(region_a, region_b) << all;
  struct Case {
    std::string value;
    std::vector<std::string> visible;
    bool twice = false;  // none visible because a device is named twice: CUDA's InvalidDevice
  };
  const std::vector<Case> cases = {
      {"1", {b}},
      {"1,0", {b, a}},
      {"0,5,1", {a}},          // the first invalid index ends the list
      {"1,1", {}, true},       // a device named twice: none
      {b.substr(0, 12), {b}},  // a unique UUID prefix
      {b + "," + a, {b, a}},
      {"GPU-", {}},            // a prefix of both: ambiguous
      {"MIG-" + a.substr(4), {a}},  // the driver matches the UUID whatever the prefix
      {"MIG-00000000-1111", {}},     // no MIG instance in a session
      {"", {}},
  };
  for (const Case& c : cases) {
    std::string out = run(c.value.c_str());
    std::string uuids;
    for (const std::string& u : c.visible) uuids += " " + u;
    std::string n = std::to_string(c.visible.size());
    if (c.visible.empty()) {
      EXPECT_EQ(line(out, "runtime"), c.twice ? "runtime 0 cudaErrorInvalidDevice" : "runtime 0 cudaErrorNoDevice")
          << "CUDA_VISIBLE_DEVICES=" << c.value << "\n" << out;
      EXPECT_EQ(line(out, "driver"), c.twice ? "driver 0 CUDA_ERROR_INVALID_DEVICE" : "driver 0 CUDA_ERROR_NO_DEVICE")
          << "CUDA_VISIBLE_DEVICES=" << c.value << "\n" << out;
    } else {
      EXPECT_EQ(line(out, "runtime"), "runtime " + n + " cudaSuccess" + uuids) << "CUDA_VISIBLE_DEVICES=" << c.value << "\n" << out;
      EXPECT_EQ(line(out, "driver"), "driver " + n + " CUDA_SUCCESS" + uuids) << "CUDA_VISIBLE_DEVICES=" << c.value << "\n" << out;
      // Ordinal 0 allocates on the device the variable named first.
      EXPECT_EQ(line(out, "alloc 0").substr(8), c.visible[0] == a ? region_a : region_b)
          << "CUDA_VISIBLE_DEVICES=" << c.value << "\n" << out;
    }
    EXPECT_EQ(line(out, "nvml"), nvml) << "CUDA_VISIBLE_DEVICES=" << c.value << "\n" << out;
  }
}

TEST_P(Skeleton, DevicesAndProperties) {
  RunResult r = RunApp("app_device_info", url(), {"2"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("host-emulated"), std::string::npos) << "an emulated device must say so: " << r.output;
}

TEST_P(Skeleton, KernelPathPlumbing) {
  // Modules, launches (not executed on this backend), variables, attributes, occupancy,
  // 2D/3D copies, pools, peer copies and host callbacks.
  EXPECT_PASSES(RunApp("app_plumbing", url()), "plumbing");
}

TEST_P(Skeleton, ClientKilledMidCopyLeavesTheServerServing) {
  BackgroundProcess app({BinDir() + "/app_copy_loop"}, ShimEnv(url()));
  ASSERT_TRUE(app.WaitForOutput("copying")) << app.Output();
  std::this_thread::sleep_for(std::chrono::milliseconds(30));  // well inside a 64 MiB copy
  app.Kill(SIGKILL);
  EXPECT_EQ(app.Wait(), 128 + SIGKILL);
  EXPECT_TRUE(server_->Alive());
  EXPECT_PASSES(RunApp("app_roundtrip", url()), "roundtrip");
  // The killed session's worker freed what it left behind.
  for (int i = 0; i < 100 && server_->Log().find("released 64 MiB in 1 allocation") == std::string::npos; i++)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_NE(server_->Log().find("released 64 MiB in 1 allocation"), std::string::npos) << server_->Log();
}

TEST_P(Skeleton, DropInLibcudartOnLibraryPath) {
  // No LD_PRELOAD: the dynamic linker finds our libcudart.so.13 first.
  std::map<std::string, std::string> env = {
      {"LD_LIBRARY_PATH", BinDir() + "/../lib"}, {"REMORA_SERVER", url()}, {"REMORA_LOG", "info"}};
  if (!SanitizerPreload().empty()) env["LD_PRELOAD"] = SanitizerPreload();  // the runtime only
  RunResult r = remora::testing::Run({BinDir() + "/app_roundtrip"}, env);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("remora-shim"), std::string::npos) << "the shim did not serve the calls: " << r.output;
}

TEST_P(Skeleton, ManyClientsAtOnce) {
  std::vector<std::unique_ptr<BackgroundProcess>> apps;
  for (int i = 0; i < 4; i++)
    apps.push_back(std::make_unique<BackgroundProcess>(std::vector<std::string>{BinDir() + "/app_bad_calls"}, ShimEnv(url())));
  for (auto& a : apps) EXPECT_EQ(a->Wait(), 0) << a->Output();
}

INSTANTIATE_TEST_SUITE_P(Transports, Skeleton, ::testing::Values("shm", "tcp"),
                         [](const auto& info) { return info.param; });

// ---- the server survives hostile and broken peers ----------------------------------------

class Robustness : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(server_.Start()); }
  void TearDown() override { EXPECT_EQ(server_.Stop(), 0) << server_.Log(); }
  ServerProcess server_;
};

TEST_F(Robustness, GarbageOnTheWire) {
  auto ep = ParseEndpoint(server_.Url("tcp"));
  ASSERT_TRUE(ep.ok());
  for (int round = 0; round < 3; round++) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_port = htons(ep->port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    std::string junk(round == 0 ? 7 : 4096, static_cast<char>(0x5a + round));
    (void)!::write(fd, junk.data(), junk.size());
    ::close(fd);
  }
  // The shm socket too: a client that connects and says nothing, then one that sends junk.
  int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un u = {};
  u.sun_family = AF_UNIX;
  std::string path = server_.Url("shm").substr(6);
  std::strncpy(u.sun_path, path.c_str(), sizeof(u.sun_path) - 1);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&u), sizeof(u)), 0);
  (void)!::write(fd, "RMR1garbagegarbagegarbagegarbage", 32);
  ::close(fd);
  EXPECT_TRUE(server_.Alive());
  RunResult r = RunApp("app_roundtrip", server_.Url("shm"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(server_.Log().find("refused"), std::string::npos) << server_.Log();
}

TEST_F(Robustness, FatBinariesShipOnceAcrossSessionsAndRestarts) {
  std::map<std::string, std::string> debug = {{"REMORA_LOG", "debug"}};
  RunResult first = RunApp("app_plumbing", server_.Url("shm"), {}, debug);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_NE(first.output.find("shipping a"), std::string::npos) << "the first session must ship the code: " << first.output;
  RunResult second = RunApp("app_plumbing", server_.Url("tcp"), {}, debug);
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_EQ(second.output.find("shipping a"), std::string::npos) << "a later session must ship no code: " << second.output;
  // The cache lives in the state directory: it survives a restart.
  std::string state = server_.state_dir();
  ASSERT_EQ(server_.Stop(), 0);
  ServerOptions o;
  o.state_dir = state;
  o.host_gpus = 2;
  ASSERT_TRUE(server_.Start(o));
  RunResult third = RunApp("app_plumbing", server_.Url("shm"), {}, debug);
  ASSERT_EQ(third.exit_code, 0) << third.output;
  EXPECT_EQ(third.output.find("shipping a"), std::string::npos) << third.output;
}

TEST_F(Robustness, NoServerMeansNoDevice) {
  RunResult r = RunApp("app_device_info", "shm://" + server_.dir() + "/nobody-here.sock");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("cudaErrorNoDevice"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("cannot use the Remora server"), std::string::npos) << r.output;
}

TEST_F(Robustness, SigtermDrainsSessionsAndExitsCleanly) {
  BackgroundProcess app({BinDir() + "/app_hold_memory", "1048576", "30"}, ShimEnv(server_.Url("shm")));
  ASSERT_TRUE(app.WaitForOutput("holding")) << app.Output();
  std::string sock = server_.Url("shm").substr(6);
  EXPECT_EQ(server_.Stop(), 0) << server_.Log();
  // The application learns its server is gone: its next call fails instead of hanging.
  EXPECT_EQ(app.Wait(30), 1) << app.Output();
  EXPECT_NE(app.Output().find("cudaErrorDevicesUnavailable"), std::string::npos) << app.Output();
  struct stat st;
  EXPECT_NE(::stat(sock.c_str(), &st), 0) << "the socket file must be removed";
  ASSERT_TRUE(server_.Start());  // for TearDown
}

// A worker whose supervisor was SIGKILLed ends its session and exits. It used to notice, say
// so to its client, and then spin forever at most of a CPU re-reading the closed control
// socket (found by the chaos soak).
TEST_F(Robustness, WorkersEndWhenTheirSupervisorIsKilled) {
  BackgroundProcess app({BinDir() + "/app_hold_memory", "1048576", "30"}, ShimEnv(server_.Url("shm")));
  ASSERT_TRUE(app.WaitForOutput("holding")) << app.Output();
  std::vector<pid_t> workers = ChildrenNamed(server_.pid(), "remora-worker");
  ASSERT_EQ(workers.size(), 1u);
  ::kill(server_.pid(), SIGKILL);
  EXPECT_EQ(app.Wait(30), 1) << app.Output();
  EXPECT_NE(app.Output().find("supervisor exited"), std::string::npos) << app.Output();
  bool gone = false;
  for (int i = 0; i < 100 && !gone; i++) {
    gone = ParentOf(workers[0]) < 0;
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (!gone) ::kill(workers[0], SIGKILL);
  EXPECT_TRUE(gone) << "the orphaned worker is still running";
  server_.Stop();
  ASSERT_TRUE(server_.Start());  // for TearDown
}

}  // namespace
}  // namespace remora::testing
