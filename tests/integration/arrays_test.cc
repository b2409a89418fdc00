// CUDA arrays, textures and surfaces with real processes on the host backend (issue 14):
// every array copy form round-tripped byte for byte over shm and tcp (tests/apps/arrays.cu),
// and array storage charged to the tenant's quota exactly, refused at the limit and released
// when the session ends with arrays still held.
#include "tenancy_support.h"

namespace remora::testing {
namespace {

class Arrays : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(s_.Start()); }
  void TearDown() override { EXPECT_EQ(s_.server.Stop(), 0) << s_.server.Log(); }
  TenancyServer s_;
};

TEST_F(Arrays, EveryCopyFormRoundTripsAndBadArraysAreRefused) {
  std::string token = s_.CreateTenant("a");
  for (const char* transport : {"shm", "tcp"}) {
    RunResult r = RunApp("app_arrays", s_.server.Url(transport), {}, {{"REMORA_TOKEN", token}});
    EXPECT_EQ(r.exit_code, 0) << transport << "\n" << r.output;
    EXPECT_NE(r.output.find("PASS arrays"), std::string::npos) << r.output;
  }
}

TEST_F(Arrays, StorageIsChargedToTheQuotaAndReleasedAtTheSessionsEnd) {
  std::string token = s_.CreateTenant("q", {"--memory", "64MiB"});
  for (const char* transport : {"shm", "tcp"}) {
    RunResult r = RunApp("app_arrays", s_.server.Url(transport), {"quota", "64"}, {{"REMORA_TOKEN", token}});
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("4 arrays of 16 MiB made, then cudaErrorMemoryAllocation"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("PASS arrays quota 64"), std::string::npos) << r.output;
    // The program exited holding 64 MiB of arrays: its session's end gives all of it back.
    auto admin = s_.Admin();
    ASSERT_TRUE(admin);
    uint64_t used = ~0ull;
    for (int i = 0; i < 500 && used != 0; i++) {
      auto tenants = admin->ListTenants();
      ASSERT_TRUE(tenants.ok());
      ASSERT_EQ(tenants->size(), 1u);
      used = (*tenants)[0].memory_used;
      if (used != 0) ::usleep(10000);
    }
    EXPECT_EQ(used, 0u) << "arrays left charged after the session ended\n" << s_.server.Log();
  }
}

// The runtime's library loading (cudaLibrary*) through the driver facade's libraries.
TEST_F(Arrays, RuntimeLibraryLoading) {
  std::string token = s_.CreateTenant("l");
  RunResult r = RunApp("app_runtime_library", s_.server.Url("shm"), {}, {{"REMORA_TOKEN", token}});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("PASS runtime_library"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace remora::testing
