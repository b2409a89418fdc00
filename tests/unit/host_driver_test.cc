// server/worker: the host-emulated driver's memory against the work its streams still have
// queued - freed memory stays mapped for work issued before the free (RetiredMemory).
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "cuda_api.h"
#include "test_util.h"
#include "worker/backend/driver.h"
#include "worker/backend/host/host_emulation.h"

namespace remora::worker::unit {
namespace {

// A host function that holds its stream until the test opens the gate.
struct Gate {
  std::atomic<bool> open{false};
  static void Wait(void* self) {
    while (!static_cast<Gate*>(self)->open.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
};

std::unique_ptr<Driver> HostDriver() {
  HostDriverOptions o;
  o.gpus = 1;
  o.memory_per_gpu = 1ull << 30;
  return MakeHostDriver(o);
}

// A session's window places its GPUs' addresses: two sessions of one application on two
// servers (windows 0 and w) never hand out the same device pointer, whatever they allocate,
// and memory in the highest windows (past the 47-bit user address space) works as any.
TEST(HostDriver, WindowPlacesEachGpusAddresses) {
  for (uint8_t w : {uint8_t{0}, uint8_t{1}, uint8_t{7}, uint8_t{255}}) {
    HostDriverOptions o;
    o.gpus = 2;
    o.memory_per_gpu = 64ull << 20;
    o.window = w;
    auto d = MakeHostDriver(o);
    for (int gpu = 0; gpu < 2; gpu++) {
      ASSERT_TRUE(d->SetDevice(gpu).ok());
      auto p = d->MemAlloc(1 << 20);
      ASSERT_TRUE(p.ok()) << p.status().ToString();
      EXPECT_GE(*p, host::DeviceBase(w, gpu)) << "window " << int{w} << " gpu " << gpu;
      EXPECT_LT(*p, host::DeviceBase(w, gpu + 1)) << "window " << int{w} << " gpu " << gpu;
      if (w < 255) {
        EXPECT_LT(*p, host::DeviceBase(static_cast<uint8_t>(w + 1), 0));
      }
      auto data = test::RandomBytes(1 << 20, w + gpu);
      std::vector<std::byte> back(1 << 20);
      ASSERT_TRUE(d->MemcpyHtoD(*p, data.data(), data.size(), nullptr).ok());
      ASSERT_TRUE(d->MemcpyDtoH(back.data(), *p, back.size(), nullptr).ok());
      ASSERT_TRUE(d->StreamSynchronize(nullptr).ok());
      EXPECT_EQ(std::memcmp(back.data(), data.data(), back.size()), 0) << "window " << int{w};
      ASSERT_TRUE(d->MemFree(*p).ok());
    }
  }
}

// Planned migration: allocations placed at the addresses another server gave them hold data
// like any other and are freed like any other; a range not free here, one beyond the GPU or
// one that wraps the address space is refused with nothing placed.
TEST(HostDriver, PlacesAllocationsAtGivenAddresses) {
  HostDriverOptions o;
  o.memory_per_gpu = 64ull << 20;
  auto source = MakeHostDriver(o);
  auto target = MakeHostDriver(o);
  auto a = source->MemAlloc(1 << 20), b = source->MemAlloc(3000), c = source->MemAlloc(2 << 20);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  ASSERT_TRUE(source->MemFree(*b).ok());  // a hole between the two that move
  ASSERT_TRUE(target->MemPlace({{*a, 1 << 20}, {*c, 2 << 20}}).ok());
  auto data = test::RandomBytes(2 << 20, 7);
  std::vector<std::byte> back(2 << 20);
  ASSERT_TRUE(target->MemcpyHtoD(*c, data.data(), data.size(), nullptr).ok());
  ASSERT_TRUE(target->MemcpyDtoH(back.data(), *c, back.size(), nullptr).ok());
  ASSERT_TRUE(target->StreamSynchronize(nullptr).ok());
  EXPECT_EQ(std::memcmp(back.data(), data.data(), back.size()), 0);
  // Taken: placing there again fails, and takes nothing of the free range beside it.
  EXPECT_EQ(target->MemPlace({{*b, 3000}, {*a, 1 << 20}}).code(), Err::kMemoryAllocation);
  auto hole = target->MemAlloc(3000);
  ASSERT_TRUE(hole.ok());
  EXPECT_EQ(*hole, *b) << "the first free range is the hole the refused placement left as it was";
  EXPECT_EQ(target->MemPlace({{host::DeviceBase(0, 1), 4096}}).code(), Err::kMemoryAllocation) << "beyond GPU 0";
  EXPECT_EQ(target->MemPlace({{*a, ~0ull - *a + 1}}).code(), Err::kMemoryAllocation) << "wraps around";
  EXPECT_EQ(target->MemPlace({{*a + 8, 64}}).code(), Err::kMemoryAllocation) << "not aligned";
  ASSERT_TRUE(target->MemFree(*a).ok());
  ASSERT_TRUE(target->MemFree(*c).ok());
  ASSERT_TRUE(target->MemFree(*hole).ok());
  auto info = target->MemGetInfo();
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->free, info->total);
}

// Without the retired mapping the queued memset wrote unmapped memory (SIGSEGV), or - when
// the next allocation's mapping landed at the same host address - the new allocation's bytes.
TEST(HostDriver, FreedMemoryStaysMappedForWorkQueuedBeforeTheFree) {
  auto d = HostDriver();
  constexpr size_t kBytes = 4 << 20;
  auto a = d->MemAlloc(kBytes);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  Gate gate;
  ASSERT_TRUE(d->LaunchHostFunc(nullptr, &Gate::Wait, &gate).ok());
  ASSERT_TRUE(d->Memset8(*a, 0xAA, kBytes, nullptr).ok());  // queued behind the gate
  ASSERT_TRUE(d->MemFree(*a).ok());
  auto mem = d->MemGetInfo();
  ASSERT_TRUE(mem.ok());
  EXPECT_EQ(mem->free, mem->total - kBytes) << "freed memory held for queued work is not free yet";
  EXPECT_FALSE(d->Memset8(*a, 0, 16, nullptr).ok()) << "freed memory takes no new work";

  // The range may be allocated again at once; its new memory is its own.
  auto b = d->MemAlloc(kBytes);
  ASSERT_TRUE(b.ok());
  auto s = d->StreamCreate(CU_STREAM_NON_BLOCKING, 0);
  ASSERT_TRUE(s.ok());
  auto data = test::RandomBytes(kBytes, 7);
  ASSERT_TRUE(d->MemcpyHtoD(*b, data.data(), kBytes, *s).ok());
  ASSERT_TRUE(d->StreamSynchronize(*s).ok());

  gate.open.store(true);
  ASSERT_TRUE(d->StreamSynchronize(nullptr).ok());  // the memset ran, into the retired mapping
  std::vector<std::byte> back(kBytes);
  ASSERT_TRUE(d->MemcpyDtoH(back.data(), *b, kBytes, *s).ok());
  ASSERT_TRUE(d->StreamSynchronize(*s).ok());
  EXPECT_EQ(std::memcmp(back.data(), data.data(), kBytes), 0) << "work queued before the free wrote the new allocation";
  ASSERT_TRUE(d->MemFree(*b).ok());
  ASSERT_TRUE(d->StreamDestroy(*s).ok());
}

// Freed memory held for queued work counts against its GPU until that work ran, so a client
// that keeps a stream blocked while it allocates and frees (cudaFreeAsync does not wait on
// this backend) gets cudaErrorMemoryAllocation instead of growing its worker past the GPU's
// size. Before the bound: 2 GiB held for a 1 GiB GPU, all of it allocated.
TEST(HostDriver, FreedMemoryHeldForQueuedWorkCountsAgainstItsGpu) {
  auto d = HostDriver();  // 1 GiB
  constexpr size_t kBytes = 256 << 20;
  Gate gate;
  ASSERT_TRUE(d->LaunchHostFunc(nullptr, &Gate::Wait, &gate).ok());
  int allocated = 0;
  Status refused = Status::Ok();
  for (int i = 0; i < 8; i++) {
    auto a = d->MemAlloc(kBytes);
    if (!a.ok()) {
      refused = a.status();
      break;
    }
    allocated++;
    ASSERT_TRUE(d->Memset8(*a, 0x44, kBytes, nullptr).ok());  // queued behind the gate: touches every page
    ASSERT_TRUE(d->MemFree(*a).ok());
  }
  EXPECT_EQ(allocated, 4) << "a 1 GiB GPU held more than 1 GiB of freed memory for queued work";
  EXPECT_EQ(refused.code(), Err::kMemoryAllocation) << refused.ToString();
  EXPECT_NE(refused.message().find("held by work queued"), std::string::npos) << refused.ToString();
  auto mem = d->MemGetInfo();
  ASSERT_TRUE(mem.ok());
  EXPECT_EQ(mem->free, 0u);

  gate.open.store(true);
  ASSERT_TRUE(d->StreamSynchronize(nullptr).ok());
  mem = d->MemGetInfo();
  ASSERT_TRUE(mem.ok());
  EXPECT_EQ(mem->free, mem->total) << "the queued work ran: its memory is free";
  auto a = d->MemAlloc(kBytes);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(d->MemFree(*a).ok());
}

// The same for a stream destroyed with the work still queued (cuStreamDestroy returns at once).
TEST(HostDriver, WorkOfADestroyedStreamStillFindsItsMemory) {
  auto d = HostDriver();
  constexpr size_t kBytes = 1 << 20;
  auto a = d->MemAlloc(kBytes);
  ASSERT_TRUE(a.ok());
  auto s = d->StreamCreate(0, 0);
  ASSERT_TRUE(s.ok());
  Gate gate;
  ASSERT_TRUE(d->LaunchHostFunc(*s, &Gate::Wait, &gate).ok());
  ASSERT_TRUE(d->Memset8(*a, 0x11, kBytes, *s).ok());
  ASSERT_TRUE(d->StreamDestroy(*s).ok());
  ASSERT_TRUE(d->MemFree(*a).ok());
  gate.open.store(true);
  // Nothing to synchronise with: the next allocation sweeps retired mappings; the driver's
  // end waits for running work.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto b = d->MemAlloc(kBytes);
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(d->MemFree(*b).ok());
}

// Host memory of the driver (the worker's bounce buffers and spills): freed while a copy
// queued from it waits, it must stay until the copy ran (found by fuzz target `request`: a
// session's end released its bounce buffers under a queued 2D copy - ASan:
// heap-use-after-free). Without ASan: a buffer this large is its own mapping in glibc, so the
// late copy faults, or reads its new owner's bytes if the next buffer lands at its address.
TEST(HostDriver, FreedHostMemoryOutlivesCopiesQueuedFromIt) {
  auto d = HostDriver();
  constexpr size_t kBytes = 1 << 20;
  auto dev = d->MemAlloc(kBytes);
  ASSERT_TRUE(dev.ok());
  auto host = d->HostAlloc(kBytes);
  ASSERT_TRUE(host.ok());
  auto data = test::RandomBytes(kBytes, 3);
  std::memcpy(*host, data.data(), kBytes);
  Gate gate;
  ASSERT_TRUE(d->LaunchHostFunc(nullptr, &Gate::Wait, &gate).ok());
  ASSERT_TRUE(d->MemcpyHtoD(*dev, *host, kBytes, nullptr).ok());
  d->HostFree(*host);
  auto again = d->HostAlloc(kBytes);  // often the same address
  ASSERT_TRUE(again.ok());
  std::memset(*again, 0x5c, kBytes);
  gate.open.store(true);
  ASSERT_TRUE(d->StreamSynchronize(nullptr).ok());
  std::vector<std::byte> back(kBytes);
  ASSERT_TRUE(d->MemcpyDtoH(back.data(), *dev, kBytes, nullptr).ok());
  ASSERT_TRUE(d->StreamSynchronize(nullptr).ok());
  EXPECT_EQ(std::memcmp(back.data(), data.data(), kBytes), 0) << "the queued copy read memory freed before it ran";
  d->HostFree(*again);
  ASSERT_TRUE(d->MemFree(*dev).ok());
}

// A client's host region (shared memory the worker mapped and registered): at a session's end
// it is unregistered and unmapped while work queued on it may still run.
TEST(HostDriver, UnmappedHostRegionOutlivesWorkQueuedOnIt) {
  auto d = HostDriver();
  constexpr size_t kBytes = 1 << 20;
  void* region = ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(region, MAP_FAILED);
  ASSERT_TRUE(d->HostRegister(region, kBytes).ok());
  auto dev = d->HostDevicePointer(region);
  ASSERT_TRUE(dev.ok());
  Gate gate;
  ASSERT_TRUE(d->LaunchHostFunc(nullptr, &Gate::Wait, &gate).ok());
  ASSERT_TRUE(d->Memset8(*dev, 0x33, kBytes, nullptr).ok());  // the device writes the region
  d->HostUnregisterAndUnmap(region, kBytes);
  EXPECT_FALSE(d->HostDevicePointer(region).ok()) << "an unregistered region takes no new work";
  gate.open.store(true);
  ASSERT_TRUE(d->StreamSynchronize(nullptr).ok());  // without the retired mapping: SIGSEGV
}

// Virtual memory: an unmapped range and a freed reservation stay writable for queued work.
TEST(HostDriver, UnmappedAndFreedRangesStayWritableForQueuedWork) {
  auto d = HostDriver();
  gen::cuda::Api& api = d->cuda();
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  size_t gran = 0;
  ASSERT_EQ(api.cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_SUCCESS);
  CUdeviceptr base = 0;
  ASSERT_EQ(api.cuMemAddressReserve(&base, 2 * gran, 0, 0, 0), CUDA_SUCCESS);
  CUmemGenericAllocationHandle h{};
  ASSERT_EQ(api.cuMemCreate(&h, 2 * gran, &prop, 0), CUDA_SUCCESS);
  ASSERT_EQ(api.cuMemMap(base, 2 * gran, 0, h, 0), CUDA_SUCCESS);
  Gate gate;
  ASSERT_TRUE(d->LaunchHostFunc(nullptr, &Gate::Wait, &gate).ok());
  ASSERT_TRUE(d->Memset8(base, 0x22, 2 * gran, nullptr).ok());
  ASSERT_EQ(api.cuMemUnmap(base, 2 * gran), CUDA_SUCCESS);
  ASSERT_EQ(api.cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_FALSE(d->Memset8(base, 0, 16, nullptr).ok()) << "an unmapped range takes no new work";
  ASSERT_EQ(api.cuMemAddressFree(base, 2 * gran), CUDA_SUCCESS);
  gate.open.store(true);
  ASSERT_TRUE(d->StreamSynchronize(nullptr).ok());
}

}  // namespace
}  // namespace remora::worker::unit
