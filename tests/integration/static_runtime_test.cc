// Programs linked as nvcc links by default, with the CUDA runtime static (issue 15): they never
// call libcudart.so.13, only libcuda.so.1 (Remora's driver facade), whose private tables
// (cuGetExportTable) the runtime inside them needs. Each is the static twin of a program the
// shared-runtime tests already run here, against a real remora-server (host-emulated backend)
// over each transport, and must pass the same checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "process_harness.h"

namespace remora::testing {
namespace {

class StaticRuntime : public ::testing::TestWithParam<std::string> {
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

 public:
  static ServerProcess* server_;
};
ServerProcess* StaticRuntime::server_ = nullptr;

// Passes, and the runtime met nothing the facade does not serve. On failure the server's log
// follows the program's output (a stall is seen from the server's side there).
void ExpectPasses(const RunResult& r, const std::string& name) {
  if (r.exit_code != 0) {
    std::string log = StaticRuntime::server_->Log();
    ADD_FAILURE() << "exit code " << r.exit_code << "\n" << r.output << "\n--- the server's log, its end:\n"
                  << log.substr(log.size() - std::min<size_t>(log.size(), 6000));
  }
  EXPECT_NE(r.output.find("PASS " + name), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("not a table Remora serves"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("not served by Remora"), std::string::npos) << r.output;
}

// Every size the shared runtime's twin round-trips (up to 64 MiB, pageable and pinned).
//
// KNOWN STALL (open, docs/ROBUSTNESS.md "The tcp round trip's stall"): in the ASan+UBSan stage,
// about one run in five, the tcp session's client hears nothing for 10 s in a cudaMemcpy
// 1.5 s in and gives the session up; the worker logs nothing after it started serving. It has
// not been reproduced outside CI. Until its cause is found, such a give-up (and only it) is
// reported with both sides' logs and the program run once more, which must pass.
TEST_P(StaticRuntime, DataRoundTripsByteForByte) {
  RunResult r = RunApp("app_static_roundtrip", url());
  if (r.exit_code != 0 && r.output.find("has not answered for") != std::string::npos) {
    std::string log = StaticRuntime::server_->Log();
    std::printf("KNOWN STALL of the tcp round trip (retried once); the program said:\n%s\n--- the server's log, its end:\n%s\n",
                r.output.c_str(), log.substr(log.size() - std::min<size_t>(log.size(), 6000)).c_str());
    r = RunApp("app_static_roundtrip", url());
  }
  ExpectPasses(r, "roundtrip");
}
TEST_P(StaticRuntime, BadCallsGetCudaErrorCodes) { ExpectPasses(RunApp("app_static_bad_calls", url()), "bad_calls"); }
TEST_P(StaticRuntime, StreamsAndEvents) { ExpectPasses(RunApp("app_static_streams_events", url()), "streams_events"); }
TEST_P(StaticRuntime, GeneratedRuntimeEntries) { ExpectPasses(RunApp("gpu_static_runtime_api", url()), "runtime_api"); }
// The static runtime finds symbols by name (cuLibraryGetGlobal): the host backend reads their
// sizes from the image's symbol tables.
TEST_P(StaticRuntime, KernelPathPlumbing) { ExpectPasses(RunApp("app_static_plumbing", url()), "plumbing"); }
TEST_P(StaticRuntime, HostCallbacksKeepStreamOrderWithCopies) {
  ExpectPasses(RunApp("app_static_callback_order", url()), "callback_order");
}
// Captured copies replayed by cuGraphLaunch (the host memory moved around each launch), and
// the explicit graph API through the driver's per-kind node functions.
TEST_P(StaticRuntime, CapturedCopiesAndMemsetsReplay) { ExpectPasses(RunApp("app_static_graphs", url(), {"20"}), "graphs"); }
// The same graph semantics through the driver facade (tests/gpu/graph_semantics.cu).
TEST_P(StaticRuntime, GraphSemanticsOfTheCudaSamples) {
  ExpectPasses(RunApp("gpu_static_graph_semantics", url()), "graph_semantics");
}
// cuMemAllocManaged, a __managed__ variable (cuLibraryGetManaged), advice, prefetch, ranges.
TEST_P(StaticRuntime, ManagedMemory) { ExpectPasses(RunApp("app_static_managed", url()), "managed"); }
TEST_P(StaticRuntime, BatchedAndPeer3DCopies) { ExpectPasses(RunApp("app_static_copy_batch", url()), "copy_batch"); }
TEST_P(StaticRuntime, DevicesAndProperties) {
  RunResult r = RunApp("app_static_device_info", url(), {"2"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("host-emulated"), std::string::npos) << r.output;
}

// The tables themselves, called directly: served ids, refused ones named in the log.
TEST_P(StaticRuntime, ExportTablesServedAndUnknownIdsLogged) {
  RunResult r = RunApp("app_export_tables", url());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("PASS export_tables"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("cuGetExportTable(01234567-89ab-cdef-0123-456789abcdef)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("not a table Remora serves (CUDA_ERROR_NOT_FOUND)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("export table TOOLS_TLS slot 1 called"), std::string::npos) << r.output;
}

INSTANTIATE_TEST_SUITE_P(Transports, StaticRuntime, ::testing::Values("shm", "tcp"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace remora::testing
