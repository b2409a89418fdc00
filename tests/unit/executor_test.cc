// server/worker: the Executor's memory calls - allocation charged to the ledger, copies in
// both directions, pointer validation (isolation) and the tenant quota.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "executor_harness.h"
#include "remora/protocol/message.h"
#include "remora/protocol/transport.h"
#include "test_util.h"

namespace remora::worker::unit {
namespace {

TEST_F(ExecutorTest, AllocAndFreeChargeAndReleaseTheLedger) {
  Reply a = Alloc(1 << 20);
  ASSERT_EQ(a.error, Err::kSuccess) << a.message;
  ASSERT_EQ(a.which, wire::Reply::POINTER);
  EXPECT_NE(a.pointer, 0u);
  EXPECT_EQ(a.generation, 1u);
  EXPECT_EQ(Used(), 1u << 20);
  EXPECT_EQ(ledger_->Tenant(tenant_, 0).used, 1u << 20);
  Reply b = Alloc(4096);
  ASSERT_EQ(b.error, Err::kSuccess);
  EXPECT_NE(b.pointer, a.pointer);
  EXPECT_EQ(Used(), (1u << 20) + 4096);
  EXPECT_EQ(Free(a.pointer).error, Err::kSuccess);
  EXPECT_EQ(Used(), 4096u);
  EXPECT_EQ(Free(b.pointer).error, Err::kSuccess);
  EXPECT_EQ(Used(), 0u);
  EXPECT_EQ(Free(b.pointer).error, Err::kInvalidValue) << "double free";
  EXPECT_EQ(Free(0).error, Err::kSuccess) << "cudaFree(nullptr) is a no-op";
  Reply zero = Alloc(0);
  EXPECT_EQ(zero.error, Err::kSuccess);
  EXPECT_EQ(zero.pointer, 0u);
  EXPECT_EQ(Used(), 0u);
}

TEST_F(ExecutorTest, AllocOnAMissingDeviceIsInvalidDevice) {
  Reply r = Call([](auto req) {
    req.setDevice(3);
    req.initMemAlloc().setSize(4096);
  });
  EXPECT_EQ(r.error, Err::kInvalidDevice) << r.message;
  EXPECT_EQ(Used(), 0u);
}

// Host-to-device then device-to-host: the bytes come back unchanged, through the bounce
// path (<= 64 KiB) and through transport chunks (larger), at an interior offset.
TEST_F(ExecutorTest, CopiesRoundTripThroughDeviceMemory) {
  Reply a = Alloc(4 << 20);
  ASSERT_EQ(a.error, Err::kSuccess);
  for (size_t size : {size_t{1}, size_t{1000}, size_t{65536}, size_t{200000}, size_t{3u << 20}}) {
    auto data = test::RandomBytes(size, size);
    uint64_t dst = a.pointer + 100;
    Reply w = HtoD(dst, data);
    ASSERT_EQ(w.error, Err::kSuccess) << size << ": " << w.message;
    Reply r = DtoH(dst, size);
    ASSERT_EQ(r.error, Err::kSuccess) << size << ": " << r.message;
    ASSERT_EQ(r.bulk.size(), size);
    EXPECT_EQ(std::memcmp(r.bulk.data(), data.data(), size), 0) << size << " bytes came back different";
  }
  // memset, then read it back.
  Reply m = Call([&](auto r) {
    auto s = r.initMemset();
    s.setDst(a.pointer);
    s.setValue(0x5a);
    s.setSize(64);
  });
  ASSERT_EQ(m.error, Err::kSuccess) << m.message;
  Reply r = DtoH(a.pointer, 64);
  ASSERT_EQ(r.bulk.size(), 64u);
  for (std::byte b : r.bulk) ASSERT_EQ(b, std::byte{0x5a});
}

// cudaMallocPitch whose size (pitch x height) does not fit in 64 bits is refused; it used
// to wrap to a tiny size that the driver allocated and the session never recorded, so its
// memory outlived the session (found by fuzz target `request`).
TEST_F(ExecutorTest, PitchedAllocationTooLargeToAddressIsRefused) {
  // cuMemAllocPitch_v2 (generated): width, height, element size; results the pointer and pitch.
  auto pitched = [&](uint64_t w, uint64_t h, unsigned elem = 16) {
    api::ArgWriter a;
    a.Put<size_t>(w);
    a.Put<size_t>(h);
    a.Put<unsigned>(elem);
    return Api(::remora::gen::cuda::k_cuMemAllocPitch_v2, a);
  };
  for (std::pair<uint64_t, uint64_t> wh : {std::pair<uint64_t, uint64_t>{1ull << 40, 1ull << 32}, {(1ull << 40) - 1, 1ull << 24}, {1ull << 33, 1ull << 31}}) {
    uint64_t w = wh.first, h = wh.second;
    Reply r = pitched(w, h);
    EXPECT_EQ(r.error, Err::kMemoryAllocation) << w << " x " << h << ": " << r.message;
  }
  EXPECT_EQ(pitched(1000, 3, 3).error, Err::kInvalidValue) << "CUDA's element sizes are 4, 8 and 16";
  EXPECT_EQ(Used(), 0u);
  ExpectGpu0Empty("driver memory allocated for a refused request");
  Reply ok = pitched(1000, 3);
  ASSERT_EQ(ok.error, Err::kSuccess) << ok.message;
  ASSERT_EQ(ok.api_result.size(), 2 * sizeof(uint64_t));
  uint64_t ptr = 0, pitch = 0;
  std::memcpy(&ptr, ok.api_result.data(), 8);
  std::memcpy(&pitch, ok.api_result.data() + 8, 8);
  EXPECT_NE(ptr, 0u);
  EXPECT_EQ(pitch, 1024u);
  EXPECT_EQ(Used(), 1024u * 3);
  Reply none = pitched(0, 3);
  ASSERT_EQ(none.error, Err::kSuccess) << "an empty extent allocates nothing";
  EXPECT_EQ(Used(), 1024u * 3);
}

// Pointers the session does not own are refused with kInvalidValue, never touched.
TEST_F(ExecutorTest, ForgedPointersAreRejected) {
  // Memory that exists in the driver but was not allocated by this session (another
  // session's buffer, as far as this one is concerned).
  Reply mine = Alloc(8192);
  ASSERT_EQ(mine.error, Err::kSuccess);
  auto data = test::RandomBytes(4096, 1);

  // An address inside the emulated device range that no one allocated, one just past
  // this session's allocation, and a plain bogus value.
  for (uint64_t forged : {mine.pointer + (uint64_t{64} << 20), mine.pointer + 8192, uint64_t{0xdeadbeef}}) {
    Reply w = HtoD(forged, data);
    EXPECT_EQ(w.error, Err::kInvalidValue) << std::hex << forged << ": " << w.message;
    Reply r = DtoH(forged, 16);
    EXPECT_EQ(r.error, Err::kInvalidValue) << std::hex << forged;
    EXPECT_TRUE(r.bulk.empty());
    EXPECT_EQ(Free(forged).error, Err::kInvalidValue) << std::hex << forged;
  }
  // A copy that starts inside the allocation and runs past its end.
  Reply over = HtoD(mine.pointer + 8192 - 100, data);
  EXPECT_EQ(over.error, Err::kInvalidValue);
  EXPECT_EQ(DtoH(mine.pointer, 8193).error, Err::kInvalidValue);
  // Freeing an interior pointer is refused and leaves the allocation intact.
  EXPECT_EQ(Free(mine.pointer + 16).error, Err::kInvalidValue);
  EXPECT_EQ(Used(), 8192u);
  ASSERT_EQ(HtoD(mine.pointer, data).error, Err::kSuccess) << "the allocation is still usable";
  Reply back = DtoH(mine.pointer, data.size());
  ASSERT_EQ(back.bulk.size(), data.size());
  EXPECT_EQ(std::memcmp(back.bulk.data(), data.data(), data.size()), 0);
  EXPECT_EQ(Ping().error, Err::kSuccess) << "the session keeps serving after refusals";
}

// The same, for memory that really exists in the driver (allocated behind the session's
// back): the executor's own table is the authority, and the memory is never written.
TEST(ExecutorIsolation, DriverMemoryOfOthersIsNeverTouched) {
  HostDriverOptions o;
  auto driver = MakeHostDriver(o);
  ASSERT_TRUE(driver->SetDevice(0).ok());
  auto other = driver->MemAlloc(4096);  // "another session's" buffer in the same driver
  ASSERT_TRUE(other.ok());
  std::vector<std::byte> secret(4096, std::byte{0x77});
  ASSERT_TRUE(driver->MemcpyHtoD(*other, secret.data(), secret.size(), nullptr).ok());

  // Not a structured binding: lambdas cannot capture those before clang 16.
  auto pair = MakePipeConnectionPair();
  std::unique_ptr<Connection> requester = std::move(pair.first), exec_conn = std::move(pair.second);
  test::AlignedStaging staging;
  SessionConfig config;
  config.gpus = {0};
  Status run;
  {
    Executor ex(*exec_conn, *driver, staging, config);
    std::thread t([&] { run = ex.Run(); });
    auto call = [&](uint64_t tag, const Fill& fill, ConstBytes bulk) -> Result<std::pair<Err, size_t>> {
      ScratchMessage msg;
      auto req = msg.InitRoot<wire::Request>();
      fill(req);
      OutFrame f;
      f.kind = FrameKind::kRequest;
      f.flags = kFlagExpectsReply;
      f.tag = tag;
      f.body = msg.Flatten();
      RETURN_IF_ERROR(requester->Send(f, bulk));
      ASSIGN_OR_RETURN(InFrame in, requester->Receive(kReplyTimeoutMs));
      BodyReader r(in.body);
      return std::make_pair(static_cast<Err>(r.Root<wire::Reply>().getError()), static_cast<size_t>(in.header.bulk_bytes));
    };
    auto junk = test::RandomBytes(4096, 3);
    auto w = call(1, [&](auto r) {
      auto m = r.initMemcpyHtoD();
      m.setDst(*other);
      m.setSize(4096);
    }, junk);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    EXPECT_EQ(w->first, Err::kInvalidValue);
    auto rd = call(2, [&](auto r) {
      auto m = r.initMemcpyDtoH();
      m.setSrc(*other);
      m.setSize(4096);
    }, {});
    ASSERT_TRUE(rd.ok());
    EXPECT_EQ(rd->first, Err::kInvalidValue);
    EXPECT_EQ(rd->second, 0u) << "no data leaves another session's memory";
    auto fr = call(3, [&](auto r) { r.initMemFree().setPtr(*other); }, {});
    ASSERT_TRUE(fr.ok());
    EXPECT_EQ(fr->first, Err::kInvalidValue);
    requester.reset();
    t.join();
  }
  EXPECT_EQ(run.code(), Err::kDevicesUnavailable);
  std::vector<std::byte> after(4096);
  ASSERT_TRUE(driver->MemcpyDtoH(after.data(), *other, after.size(), nullptr).ok()) << "still allocated";
  EXPECT_EQ(after, secret) << "the other buffer was modified";
}

// Quota: an allocation over the tenant's limit is kMemoryAllocation (counted as a
// refusal); after a free the same allocation fits. memGetInfo shows the quota.
TEST_F(ExecutorTest, OverLimitAllocationIsRefusedUntilMemoryIsFreed) {
  ASSERT_TRUE(ledger_->SetLimit(tenant_, 0, 1 << 20).ok());
  Reply info = Call([](auto r) { r.setMemGetInfo(); });
  ASSERT_EQ(info.error, Err::kSuccess);
  EXPECT_EQ(info.mem_total, 1u << 20) << "the tenant sees its share, not the card";
  EXPECT_EQ(info.mem_free, 1u << 20);

  Reply a = Alloc(768 << 10);
  ASSERT_EQ(a.error, Err::kSuccess);
  Reply b = Alloc(512 << 10);
  EXPECT_EQ(b.error, Err::kMemoryAllocation) << b.message;
  EXPECT_EQ(ledger_->Tenant(tenant_, 0).refused, 1u);
  EXPECT_EQ(Used(), 768u << 10) << "a refused allocation charges nothing";
  info = Call([](auto r) { r.setMemGetInfo(); });
  EXPECT_EQ(info.mem_free, 256u << 10);

  ASSERT_EQ(Free(a.pointer).error, Err::kSuccess);
  Reply c = Alloc(512 << 10);
  EXPECT_EQ(c.error, Err::kSuccess) << c.message;
  EXPECT_EQ(Used(), 512u << 10);
}

// The device list says what the tenant gets: its quota as the device's memory, and an
// emulated device named as such (never presented as a GPU).
TEST_F(ExecutorTest, DevicesShowTheQuotaAndSayTheyAreEmulated) {
  ASSERT_TRUE(ledger_->SetLimit(tenant_, 0, 256 << 20).ok());
  Reply r = Call([](auto req) { req.setGetDevices(); });
  ASSERT_EQ(r.error, Err::kSuccess) << r.message;
  ASSERT_EQ(r.devices.size(), 1u);
  EXPECT_EQ(r.devices[0].total_memory, 256u << 20);
  EXPECT_EQ(r.devices[0].physical_memory, kGpuMemory);
  EXPECT_TRUE(r.devices[0].emulated);
  EXPECT_NE(r.devices[0].name.find("not a GPU"), std::string::npos) << r.devices[0].name;
}

}  // namespace
}  // namespace remora::worker::unit
