// server/worker: math-library objects in a session (LibObjects), with the host backend's
// emulated cuBLAS behind raw generated calls, as a client that does not check anything would
// send them: forged, reused and wrong-kind ids, scalars that lie about the pointer mode,
// operands outside the session's memory, workspaces charged to the quota and released with
// their handle or the session.
#include <cublas.h>
#include <gtest/gtest.h>

#include <cstring>

#include "cublas_wire.h"
#include "executor_harness.h"

namespace remora::worker::unit {
namespace {

namespace cb = ::remora::gen::cublas;

constexpr uint64_t Id(HandleKind kind, uint64_t n) { return (uint64_t{static_cast<uint8_t>(kind)} << 56) | (n << 4); }
constexpr uint64_t kWorkspace = 4ull << 20;  // server/worker/libs/lib_cublas.h

class LibraryTest : public ExecutorTest {
 protected:
  Reply Lib(cb::Fn fn, const api::ArgWriter& args, bool expects_reply = true) {
    auto fill = [&](wire::Request::Builder r) {
      auto a = r.initApiCall();
      a.setLibrary(cb::kLibrary);
      a.setFunction(fn);
      a.setArgs(capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(args.bytes().data()), args.bytes().size()));
    };
    if (!expects_reply) {
      Send(fill, {}, false);
      return Reply{};
    }
    return Call(fill);
  }
  Reply Create(uint64_t id) { return Lib(cb::k_cublasCreate_v2, HandleArg(id)); }
  Reply Version(uint64_t id) {
    api::ArgWriter w = HandleArg(id);
    return Lib(cb::k_cublasGetVersion_v2, w);
  }
  void Destroy(uint64_t id) { Lib(cb::k_cublasDestroy_v2, HandleArg(id), false); }
  // SDOT of n floats at x and y (stride 1), the result on the host (flag 0) or at `result`.
  Reply Sdot(uint64_t h, int n, uint64_t x, uint64_t y, bool device, uint64_t result = 0) {
    api::ArgWriter w = HandleArg(h);
    w.Put<int>(n);
    w.Put<uint64_t>(x);
    w.Put<int>(1);
    w.Put<uint64_t>(y);
    w.Put<int>(1);
    w.Put<uint8_t>(device);
    if (device) w.Put<uint64_t>(result);
    else w.Put<uint64_t>(sizeof(float));
    return Lib(cb::k_cublasSdot_v2, w);
  }
  // SGEMM of n x n matrices (host scalars 1 and 0), posted.
  void Sgemm(uint64_t h, int n, uint64_t a, uint64_t b, uint64_t c) {
    api::ArgWriter w = HandleArg(h);
    w.Put<int>(CUBLAS_OP_N);
    w.Put<int>(CUBLAS_OP_N);
    for (int i = 0; i < 3; i++) w.Put<int>(n);
    float one = 1, zero = 0;
    w.Put<uint8_t>(0);
    w.PutArray(&one, sizeof(one), 1);
    w.Put<uint64_t>(a);
    w.Put<int>(n);
    w.Put<uint64_t>(b);
    w.Put<int>(n);
    w.Put<uint8_t>(0);
    w.PutArray(&zero, sizeof(zero), 1);
    w.Put<uint64_t>(c);
    w.Put<int>(n);
    Lib(cb::k_cublasSgemm_v2, w, false);
  }
  Reply Upload(const std::vector<float>& v) {
    Reply a = Alloc(v.size() * sizeof(float));
    EXPECT_EQ(a.error, Err::kSuccess);
    std::vector<std::byte> bytes(v.size() * sizeof(float));
    std::memcpy(bytes.data(), v.data(), bytes.size());
    EXPECT_EQ(HtoD(a.pointer, bytes).error, Err::kSuccess);
    return a;
  }
};

TEST_F(LibraryTest, AHandleIsCreatedUsedAndDestroyedWithItsWorkspaceCharged) {
  const uint64_t h = Id(HandleKind::kCublasHandle, 1);
  Reply c = Create(h);
  ASSERT_EQ(c.error, Err::kSuccess) << c.message;
  EXPECT_EQ(Used(), kWorkspace) << "the handle's workspace is the tenant's memory";
  Reply v = Version(h);
  ASSERT_EQ(v.error, Err::kSuccess) << v.message;
  ASSERT_EQ(v.api_result.size(), sizeof(int));
  int version = 0;
  std::memcpy(&version, v.api_result.data(), sizeof(int));
  EXPECT_EQ(version, CUBLAS_VERSION);
  // A real computation through the handle.
  Reply x = Upload({1, 2, 3, 4}), y = Upload({10, 20, 30, 40});
  Reply d = Sdot(h, 4, x.pointer, y.pointer, false);
  ASSERT_EQ(d.error, Err::kSuccess) << d.message;
  float dot = 0;
  ASSERT_EQ(d.api_result.size(), 8 + sizeof(float));  // u64 count, then the float
  std::memcpy(&dot, d.api_result.data() + 8, sizeof(float));
  EXPECT_EQ(dot, 300.0f);
  Destroy(h);
  EXPECT_EQ(Ping().error, Err::kSuccess);
  EXPECT_EQ(Used(), 2 * 4 * sizeof(float)) << "only the two vectors are left";
  Reply gone = Version(h);
  EXPECT_EQ(gone.error, Err::kInvalidValue) << "a destroyed handle is gone";
}

TEST_F(LibraryTest, ForgedReusedAndWrongKindIdsAreRefused) {
  const uint64_t h = Id(HandleKind::kCublasHandle, 7);
  ASSERT_EQ(Create(h).error, Err::kSuccess);
  for (uint64_t bogus : {Id(HandleKind::kCublasHandle, 8), Id(HandleKind::kCublasLtHandle, 7), uint64_t{1}, h + 1, ~uint64_t{0}}) {
    Reply r = Version(bogus);
    EXPECT_EQ(r.error, Err::kInvalidValue) << std::hex << bogus << ": " << r.message;
  }
  // A create must name a fresh id of its own kind.
  for (uint64_t bad : {h, Id(HandleKind::kCublasLtHandle, 9), Id(HandleKind::kCublasHandle, 9) | 1, Id(HandleKind::kCublasHandle, 0)}) {
    Reply r = Create(bad);
    EXPECT_EQ(r.error, Err::kInvalidValue) << std::hex << bad << ": " << r.message;
    EXPECT_NE(r.message.find("malformed"), std::string::npos) << r.message;
  }
  EXPECT_EQ(Used(), kWorkspace) << "refused creates charge nothing";
  EXPECT_EQ(Version(h).error, Err::kSuccess) << "the real handle is untouched";
}

TEST_F(LibraryTest, AScalarThatLiesAboutThePointerModeIsRefused) {
  const uint64_t h = Id(HandleKind::kCublasHandle, 1);
  ASSERT_EQ(Create(h).error, Err::kSuccess);
  Reply x = Upload({1, 2}), r = Upload({0});
  // Host pointer mode, but the result is claimed to be a device address: never handed to
  // the library as one.
  Reply d = Sdot(h, 2, x.pointer, x.pointer, /*device=*/true, r.pointer);
  EXPECT_EQ(d.error, Err::kInvalidValue) << d.message;
  EXPECT_NE(d.message.find("pointer mode"), std::string::npos) << d.message;
}

TEST_F(LibraryTest, OperandsOutsideTheSessionsMemoryNeverReachTheLibrary) {
  const uint64_t h = Id(HandleKind::kCublasHandle, 1);
  ASSERT_EQ(Create(h).error, Err::kSuccess);
  Reply a = Upload(std::vector<float>(16, 1.0f)), c = Upload(std::vector<float>(16, 0.0f));
  // 4x4 fits; 5x5 runs past the 64-byte allocations.
  Sgemm(h, 4, a.pointer, a.pointer, c.pointer);
  Reply ok = Ping();
  EXPECT_EQ(ok.async_error, Err::kSuccess) << ok.message;
  Sgemm(h, 5, a.pointer, a.pointer, c.pointer);
  Sgemm(h, 4, 0x7f0000001000, a.pointer, c.pointer);
  Reply sync = Ping();
  EXPECT_EQ(sync.async_error, Err::kInvalidValue) << "the failed SGEMM is reported at the next synchronising call";
  Reply back = DtoH(c.pointer, 16 * sizeof(float));
  float first = 0;
  std::memcpy(&first, back.bulk.data(), sizeof(float));
  EXPECT_EQ(first, 4.0f) << "only the 4x4 SGEMM ran";
}

TEST_F(LibraryTest, WorkspacesCountAgainstTheQuota) {
  ASSERT_TRUE(ledger_->SetLimit(tenant_, 0, kWorkspace + kWorkspace / 2).ok());
  const uint64_t h1 = Id(HandleKind::kCublasHandle, 1), h2 = Id(HandleKind::kCublasHandle, 2);
  ASSERT_EQ(Create(h1).error, Err::kSuccess);
  Reply full = Create(h2);
  EXPECT_EQ(full.error_domain, static_cast<uint16_t>(Domain::kCublas)) << full.message;
  EXPECT_EQ(static_cast<uint32_t>(full.error), static_cast<uint32_t>(CUBLAS_STATUS_ALLOC_FAILED)) << full.message;
  EXPECT_EQ(Version(h2).error, Err::kInvalidValue) << "the refused handle does not exist";
  EXPECT_EQ(Used(), kWorkspace);
  Destroy(h1);
  ASSERT_EQ(Ping().error, Err::kSuccess);
  EXPECT_EQ(Used(), 0u);
  EXPECT_EQ(Create(Id(HandleKind::kCublasHandle, 3)).error, Err::kSuccess) << "room again";
}

TEST_F(LibraryTest, TheSessionsEndReleasesItsObjects) {
  for (uint64_t n = 1; n <= 3; n++) ASSERT_EQ(Create(Id(HandleKind::kCublasHandle, n)).error, Err::kSuccess);
  EXPECT_EQ(Used(), 3 * kWorkspace);
  Status st = EndBy(/*goodbye=*/false);
  EXPECT_EQ(st.code(), Err::kDevicesUnavailable);
  executor_.reset();
  EXPECT_EQ(Used(), 0u);
  auto info = driver_->MemGetInfo();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->free, info->total) << "every workspace was freed";
}

}  // namespace
}  // namespace remora::worker::unit
