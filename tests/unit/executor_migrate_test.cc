// server/worker: a migration's import of stream-ordered memory (ops_migrate.cc). Where its
// range is free it is placed, and its cudaFreeAsync frees the placement once the stream gets
// there; where the driver's pools hold the range (the CUDA driver reserves its pools'
// addresses in every process), the device's pool is asked for it, and answers below it are
// given back. The driver is the host-emulated one behind a wrapper that plays the CUDA
// driver's part: a range it refuses to place, and the pool's answers.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <mutex>
#include <vector>

#include <cuda.h>

#include "executor_harness.h"
#include "test_util.h"
#include "worker/backend/driver_wrapper.h"
#include "worker/backend/placement.h"

namespace remora::worker::unit {
namespace {

constexpr uint64_t kMiB = 1 << 20;

class PoolsHoldRanges final : public DriverWrapper {
 public:
  explicit PoolsHoldRanges(Driver& host) : DriverWrapper(host) {}

  Status MemPlace(const std::vector<std::pair<DevPtr, uint64_t>>& list) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& r : list)
        if (std::find(held_.begin(), held_.end(), r.first) != held_.end())
          return Error(Err::kMemoryAllocation, "device addresses 0x{:x} are not free on this server", r.first);
    }
    return target().MemPlace(list);
  }
  // The pool of the current device (null) answers from `answers_` while there are any, with
  // memory placed at each answer so that it can be used and freed.
  Result<DevPtr> MemAllocAsync(size_t bytes, DPool pool, DStream s) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (pool != nullptr || answers_.empty()) return target().MemAllocAsync(bytes, pool, s);
    DevPtr p = answers_.front();
    answers_.pop_front();
    RETURN_IF_ERROR(target().MemPlace({{p, bytes}}));
    return p;
  }
  Status MemFreeAsync(DevPtr p, DStream) override {
    std::lock_guard<std::mutex> lock(mu_);
    freed_async_.push_back(p);
    return target().MemFree(p);
  }
  Status MemFree(DevPtr p) override {
    std::lock_guard<std::mutex> lock(mu_);
    freed_.push_back(p);
    return target().MemFree(p);
  }

  void Hold(DevPtr at) {
    std::lock_guard<std::mutex> lock(mu_);
    held_.push_back(at);
  }
  void Answer(std::vector<DevPtr> a) {
    std::lock_guard<std::mutex> lock(mu_);
    answers_.assign(a.begin(), a.end());
  }
  void Forget() {
    std::lock_guard<std::mutex> lock(mu_);
    freed_async_.clear();
    freed_.clear();
  }
  std::vector<DevPtr> freed_async() {
    std::lock_guard<std::mutex> lock(mu_);
    return freed_async_;
  }
  std::vector<DevPtr> freed() {
    std::lock_guard<std::mutex> lock(mu_);
    return freed_;
  }

 private:
  std::mutex mu_;
  std::vector<DevPtr> held_;  // ranges the driver's pools hold: MemPlace refuses them
  std::deque<DevPtr> answers_;
  std::vector<DevPtr> freed_async_, freed_;
};

class MigrateImportTest : public ExecutorTest {
 protected:
  MigrateImportTest() {
    wrap_driver_ = [this](Driver& host) {
      auto d = std::make_unique<PoolsHoldRanges>(host);
      pools_ = d.get();
      return d;
    };
  }
  void SetUp() override {
    ExecutorTest::SetUp();
    // An address range of the emulated GPU, free again: where the old server's memory was.
    Reply a = Alloc(16 * kMiB);
    ASSERT_EQ(a.error, Err::kSuccess) << a.message;
    base_ = a.pointer;
    ASSERT_EQ(Free(base_).error, Err::kSuccess);
    ASSERT_EQ(Used(), 0u);
    pools_->Forget();
  }
  Reply Import(DevPtr at, uint64_t size, bool stream_ordered) {
    return Call([&](auto r) {
      auto al = r.initMigrateImport().initAllocations(1);
      al[0].setPtr(at);
      al[0].setSize(size);
      al[0].setOrdinal(0);
      al[0].setStreamOrdered(stream_ordered);
    });
  }
  Reply FreeAsync(DevPtr p) {
    return Call([&](auto r) {
      auto f = r.initFreeAsync();
      f.setPtr(p);
      f.initStream().setHandle(0);
    });
  }
  // The memory at `p` holds what is written there.
  void ExpectUsable(DevPtr p) {
    auto data = test::RandomBytes(4096, 11);
    ASSERT_EQ(HtoD(p, data).error, Err::kSuccess);
    EXPECT_EQ(DtoH(p, 4096).bulk, data);
  }

  PoolsHoldRanges* pools_ = nullptr;
  DevPtr base_ = 0;
};

TEST_F(MigrateImportTest, StreamOrderedMemoryIsPlacedWhereFreeAndItsFreeWaitsForTheStream) {
  const DevPtr at = base_ + 4 * kMiB;
  Reply r = Import(at, kMiB, true);
  ASSERT_EQ(r.error, Err::kSuccess) << r.message;
  EXPECT_EQ(Used(), 2 * kMiB) << "charged the granule it holds (worker/backend/placement.h)";
  ExpectUsable(at);
  // No pool's: cudaFreeAsync frees the placement (MemFree), never the pool's free.
  ASSERT_EQ(FreeAsync(at).error, Err::kSuccess);
  ASSERT_EQ(StreamSync(0).error, Err::kSuccess);
  ASSERT_EQ(Ping().error, Err::kSuccess);
  // The op ran before the ping was read: the stream had passed its event when it was synchronised.
  EXPECT_EQ(pools_->freed(), std::vector<DevPtr>{at});
  EXPECT_TRUE(pools_->freed_async().empty());
  EXPECT_EQ(Used(), 0u) << "the charge went back with the memory";
  EXPECT_EQ(FreeAsync(at).error, Err::kInvalidValue) << "freed twice";
  ExpectGpu0Empty();
}

TEST_F(MigrateImportTest, ARangeThePoolsHoldIsAskedOfThePoolAndAnswersBelowItGoBack) {
  const DevPtr at = base_ + 8 * kMiB, below = base_ + 2 * kMiB;
  pools_->Hold(at);
  pools_->Answer({below, at});
  Reply r = Import(at, kMiB, true);
  ASSERT_EQ(r.error, Err::kSuccess) << r.message;
  EXPECT_EQ(Used(), 2 * kMiB);
  EXPECT_EQ(pools_->freed_async(), std::vector<DevPtr>{below}) << "the answer below was given back";
  ExpectUsable(at);
  // The pool's own memory now: its free goes back to the pool.
  ASSERT_EQ(FreeAsync(at).error, Err::kSuccess);
  ASSERT_EQ(StreamSync(0).error, Err::kSuccess);
  EXPECT_EQ(pools_->freed_async(), (std::vector<DevPtr>{below, at}));
  EXPECT_TRUE(pools_->freed().empty());
}

TEST_F(MigrateImportTest, APoolThatAnswersElsewhereFailsTheImportWithNothingCharged) {
  const DevPtr at = base_ + 8 * kMiB, above = base_ + 12 * kMiB;
  pools_->Hold(at);
  pools_->Answer({above});
  Reply r = Import(at, kMiB, true);
  EXPECT_EQ(r.error, Err::kMemoryAllocation);
  EXPECT_NE(r.message.find("cannot be had here"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("not free"), std::string::npos) << r.message;
  EXPECT_EQ(pools_->freed_async(), std::vector<DevPtr>{above}) << "the wrong answer was given back";
  EXPECT_EQ(Used(), 0u);
  ExpectGpu0Empty();
}

// Answers below the wanted address are charged while they are held: a client's import
// cannot make the worker hold more than its tenant may (here 3 MiB: the memory's granule, 2
// MiB, and one answer below, the second refused).
TEST_F(MigrateImportTest, AnswersBelowAreHeldOnlyWithinTheQuota) {
  ASSERT_TRUE(ledger_->SetLimit(tenant_, 0, 3 * kMiB).ok());
  const DevPtr at = base_ + 8 * kMiB;
  pools_->Hold(at);
  pools_->Answer({base_, base_ + kMiB, base_ + 2 * kMiB, base_ + 3 * kMiB, at});
  Reply r = Import(at, kMiB, true);
  EXPECT_EQ(r.error, Err::kMemoryAllocation);
  EXPECT_NE(r.message.find("cannot be had here"), std::string::npos) << r.message;
  EXPECT_EQ(pools_->freed_async(), (std::vector<DevPtr>{base_ + kMiB, base_}))
      << "the answer over the quota at once, then the one held";
  EXPECT_EQ(Used(), 0u);
  ExpectGpu0Empty();
}

// A device's own pool the application asked for comes back under its handle, with the
// attributes it had; an attribute a migration does not carry, and a second pool for one
// device, are refused.
constexpr uint64_t PoolHandle(uint64_t n) { return (uint64_t{static_cast<uint8_t>(HandleKind::kPool)} << 56) | (n << 4); }

class MigratePoolTest : public ExecutorTest {
 protected:
  Reply ImportPools(const std::vector<std::vector<std::pair<int, uint64_t>>>& pools) {
    return Call([&](auto r) {
      auto list = r.initMigrateImport().initPools(static_cast<unsigned>(pools.size()));
      for (unsigned i = 0; i < pools.size(); i++) {
        list[i].setHandle(PoolHandle(5 + i));
        list[i].setOrdinal(0);
        auto al = list[i].initAttributes(static_cast<unsigned>(pools[i].size()));
        for (unsigned j = 0; j < al.size(); j++) {
          al[j].setId(pools[i][j].first);
          al[j].setValue(pools[i][j].second);
        }
      }
    });
  }
  uint64_t Threshold() {
    EXPECT_TRUE(driver_->SetDevice(0).ok());
    auto pool = driver_->DefaultMemPool(0);
    EXPECT_TRUE(pool.ok());
    auto v = driver_->MemPoolGetAttribute(*pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD);
    EXPECT_TRUE(v.ok());
    return v.ok() ? *v : 0;
  }
};

TEST_F(MigratePoolTest, ADevicesOwnPoolComesBackUnderItsHandleWithItsAttributes) {
  Reply r = ImportPools({{{CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, 3 << 20}, {CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, 0}}});
  ASSERT_EQ(r.error, Err::kSuccess) << r.message;
  EXPECT_EQ(Threshold(), 3u << 20);
  // The handle is live: the pool answers through it.
  Reply a = Call([](auto q) {
    auto m = q.initMallocAsync();
    m.setSize(4096);
    m.setPool(PoolHandle(5));
    m.initStream().setHandle(0);
  });
  EXPECT_EQ(a.error, Err::kSuccess) << a.message;
}

TEST_F(MigratePoolTest, AttributesAMigrationDoesNotCarryAreRefused) {
  Reply r = ImportPools({{{CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, 1}}});
  EXPECT_EQ(r.error, Err::kInvalidValue);
  EXPECT_NE(r.message.find("not one a migration carries"), std::string::npos) << r.message;
}

TEST_F(MigratePoolTest, ASecondPoolOfADeviceIsRefused) {
  Reply r = ImportPools({{}, {}});
  EXPECT_EQ(r.error, Err::kInvalidValue);
  EXPECT_NE(r.message.find("two migrated pools"), std::string::npos) << r.message;
}

// Memory of cudaMalloc stays placed as before: a range the driver will not place fails the
// import (the pool is not asked for it).
TEST_F(MigrateImportTest, PlainMemoryIsNeverAskedOfThePool) {
  const DevPtr at = base_ + 8 * kMiB;
  pools_->Hold(at);
  pools_->Answer({at});
  Reply r = Import(at, kMiB, false);
  EXPECT_EQ(r.error, Err::kMemoryAllocation);
  EXPECT_TRUE(pools_->freed_async().empty());
  EXPECT_EQ(Used(), 0u);
}

}  // namespace
// Issue 40, N5: what a placement holds, in a cuda-like granule of 2 MiB - what the import is
// charged. Allocations sharing a granule share one extent; one allocation per granule holds
// the whole granule (the review's 2048 x 1 byte: 4 GiB, not 2 KiB); an allocation across a
// boundary holds both granules.
TEST(Placement, ExtentsHoldWholeGranules) {
  constexpr uint64_t g = 2 * kMiB;
  const DevPtr at = 0x7f0000000000ull;
  std::vector<std::pair<DevPtr, uint64_t>> spread;
  for (uint64_t i = 0; i < 2048; i++) spread.emplace_back(at + i * g, 1);
  EXPECT_EQ(PlacementBytes(spread, g), 4096 * kMiB);
  auto packed = PlacementExtents({{at, 4096}, {at + 8192, 4096}, {at + g - 1, 2}, {at + 3 * g, g}}, g);
  ASSERT_EQ(packed.size(), 2u);
  EXPECT_EQ(packed[0].lo, at);
  EXPECT_EQ(packed[0].hi, at + 2 * g) << "the third allocation crosses into the next granule";
  EXPECT_EQ(packed[0].members.size(), 3u);
  EXPECT_EQ(packed[0].slack(), 2 * g - 8194);
  EXPECT_EQ(packed[1].bytes(), g);
  EXPECT_EQ(packed[1].slack(), 0u);
  EXPECT_EQ(PlacementBytes({{at + 5, 0}}, g), g) << "a size of 0 holds a granule too";
}

}  // namespace remora::worker::unit
