// The host-emulated backend: device memory is host RAM behind fake device addresses,
// streams and events complete at once, kernels are not executed. It lets every path that
// needs no kernel execution (protocol, transports, quotas, isolation, faults) run in CI with
// real processes. It never claims to be a GPU: its name and every log line say so.
#include <cuda.h>  // enum values of device attributes only; nothing is linked
#include <sys/mman.h>

#include <cstring>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "remora/base/log.h"
#include "remora/base/util.h"
#include "worker/driver.h"

namespace remora::worker {
namespace {

// Fake device addresses start here, 1 TiB apart per emulated GPU: far from where Linux
// places executables, heaps and mmaps, so they do not alias the client's host pointers.
constexpr uint64_t kDeviceBase = 0x200000000000ull;
constexpr uint64_t kDeviceStride = 1ull << 40;
constexpr uint64_t kAlign = 512;

struct Block {
  std::byte* host;
  uint64_t size;
};

// First-fit allocator over one emulated GPU's address range.
class EmulatedHeap {
 public:
  EmulatedHeap(uint64_t base, uint64_t capacity) : base_(base), capacity_(capacity) { free_[base] = capacity; }

  Result<DevPtr> Alloc(uint64_t bytes) {
    uint64_t need = AlignUp(std::max<uint64_t>(bytes, 1), kAlign);
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < need) continue;
      DevPtr p = it->first;
      uint64_t left = it->second - need;
      free_.erase(it);
      if (left > 0) free_[p + need] = left;
      void* host = ::mmap(nullptr, need, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (host == MAP_FAILED) {
        Free(p, need);
        return Error(Err::kMemoryAllocation, "emulated device memory: host mmap of {} failed", FormatSize(need));
      }
      blocks_[p] = Block{static_cast<std::byte*>(host), need};
      used_ += need;
      return p;
    }
    return Error(Err::kMemoryAllocation, "emulated GPU is out of memory ({} requested, {} of {} in use)",
                 FormatSize(bytes), FormatSize(used_), FormatSize(capacity_));
  }

  Status Release(DevPtr p) {
    auto it = blocks_.find(p);
    if (it == blocks_.end()) return Error(Err::kInvalidValue, "0x{:x} is not an emulated allocation", p);
    ::munmap(it->second.host, it->second.size);
    uint64_t size = it->second.size;
    blocks_.erase(it);
    used_ -= size;
    Free(p, size);
    return Status::Ok();
  }

  // Host address of [p, p+n), which must lie inside one block.
  Result<std::byte*> Translate(DevPtr p, uint64_t n) {
    auto it = blocks_.upper_bound(p);
    if (it == blocks_.begin()) return Error(Err::kInvalidValue, "0x{:x} is not emulated device memory", p);
    --it;
    uint64_t off = p - it->first;
    if (off >= it->second.size || n > it->second.size - off)
      return Error(Err::kInvalidValue, "0x{:x}+{} is outside emulated device memory", p, n);
    return it->second.host + off;
  }

  bool Owns(DevPtr p) const { return p >= base_ && p < base_ + kDeviceStride; }
  uint64_t used() const { return used_; }
  uint64_t capacity() const { return capacity_; }

 private:
  void Free(DevPtr p, uint64_t size) {
    auto [it, _] = free_.emplace(p, size);
    auto next = std::next(it);
    if (next != free_.end() && it->first + it->second == next->first) {
      it->second += next->second;
      free_.erase(next);
    }
    if (it != free_.begin()) {
      auto prev = std::prev(it);
      if (prev->first + prev->second == it->first) {
        prev->second += it->second;
        free_.erase(it);
      }
    }
  }

  uint64_t base_, capacity_;
  uint64_t used_ = 0;
  std::map<DevPtr, uint64_t> free_;
  std::map<DevPtr, Block> blocks_;
};

struct EmuEvent {
  unsigned flags;
  bool recorded = false;
  uint64_t nanos = 0;
};

std::vector<int32_t> EmulatedAttributes(int device) {
  std::vector<int32_t> a(kNumDeviceAttributes, 0);
  auto set = [&](CUdevice_attribute k, int32_t v) { a[static_cast<size_t>(k)] = v; };
  // Plausible Hopper-class limits, so programs that size launches from them behave.
  set(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1024);
  set(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, 1024);
  set(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, 1024);
  set(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, 64);
  set(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, 2147483647);
  set(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, 65535);
  set(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, 65535);
  set(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, 49152);
  set(CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY, 65536);
  set(CU_DEVICE_ATTRIBUTE_WARP_SIZE, 32);
  set(CU_DEVICE_ATTRIBUTE_MAX_PITCH, 2147483647);
  set(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, 65536);
  set(CU_DEVICE_ATTRIBUTE_CLOCK_RATE, 1000000);
  set(CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, 512);
  set(CU_DEVICE_ATTRIBUTE_GPU_OVERLAP, 1);
  set(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 4);
  set(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, 1);
  set(CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS, 1);
  set(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 0x80 + device);
  set(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, 1000000);
  set(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, 256);
  set(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, 4 << 20);
  set(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, 2048);
  set(CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, 2);
  set(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1);
  set(CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT, 32);
  set(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 9);
  set(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0);
  set(CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED, 1);
  set(CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED, 1);
  set(CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED, 1);
  set(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, 233472);
  set(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR, 65536);
  set(CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, 1);
  set(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 232448);
  set(CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED, 1);
  set(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, 32);
  set(CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK, 1024);
  set(CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 1);
  set(CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH, 1);
  return a;
}

class HostDriver final : public Driver {
 public:
  explicit HostDriver(const HostDriverOptions& o) : options_(o) {
    for (int i = 0; i < o.gpus; i++) heaps_.emplace_back(kDeviceBase + uint64_t(i) * kDeviceStride, o.memory_per_gpu);
  }

  const char* name() const override { return "host-emulated"; }
  bool emulated() const override { return true; }
  int DriverVersion() override { return CUDA_VERSION; }

  Result<int> DeviceCount() override { return options_.gpus; }

  Result<DeviceDescription> Describe(int device) override {
    if (device < 0 || device >= options_.gpus) return Error(Err::kInvalidDevice, "no emulated GPU {}", device);
    DeviceDescription d;
    d.name = fmt::format("Remora host-emulated GPU {} (not a GPU)", device);
    for (int i = 0; i < 16; i++) d.uuid[i] = static_cast<uint8_t>(0xe0 + i + device * 16);
    d.total_memory = options_.memory_per_gpu;
    d.pci_bus_id = fmt::format("0000:{:02x}:00.0", 0x80 + device);
    d.attributes = EmulatedAttributes(device);
    return d;
  }

  Status SetDevice(int device) override {
    if (device < 0 || device >= options_.gpus) return Error(Err::kInvalidDevice, "no emulated GPU {}", device);
    current_ = device;
    return Status::Ok();
  }
  uint64_t ContextOverhead() override { return 0; }

  Result<MemoryInfo> MemGetInfo() override {
    EmulatedHeap& h = heaps_[static_cast<size_t>(current_)];
    return MemoryInfo{h.capacity() - h.used(), h.capacity()};
  }

  Result<DevPtr> MemAlloc(size_t bytes) override { return heaps_[static_cast<size_t>(current_)].Alloc(bytes); }
  Status MemFree(DevPtr p) override {
    ASSIGN_OR_RETURN(EmulatedHeap * h, HeapOf(p));
    return h->Release(p);
  }

  Status MemcpyHtoD(DevPtr dst, const void* src, size_t n, DStream) override {
    ASSIGN_OR_RETURN(std::byte * d, Translate(dst, n));
    std::memcpy(d, src, n);
    return Status::Ok();
  }
  Status MemcpyDtoH(void* dst, DevPtr src, size_t n, DStream) override {
    ASSIGN_OR_RETURN(std::byte * s, Translate(src, n));
    std::memcpy(dst, s, n);
    return Status::Ok();
  }
  Status MemcpyDtoD(DevPtr dst, DevPtr src, size_t n, DStream) override {
    ASSIGN_OR_RETURN(std::byte * d, Translate(dst, n));
    ASSIGN_OR_RETURN(std::byte * s, Translate(src, n));
    std::memmove(d, s, n);
    return Status::Ok();
  }
  Status Memset8(DevPtr dst, uint8_t v, size_t n, DStream) override {
    ASSIGN_OR_RETURN(std::byte * d, Translate(dst, n));
    std::memset(d, v, n);
    return Status::Ok();
  }

  Result<void*> HostAlloc(size_t bytes) override {
    void* p = std::aligned_alloc(4096, AlignUp(std::max<size_t>(bytes, 1), 4096));
    if (p == nullptr) return Error(Err::kMemoryAllocation, "host allocation of {} failed", FormatSize(bytes));
    return p;
  }
  void HostFree(void* p) override { std::free(p); }
  Status HostRegister(void*, size_t) override { return Status::Ok(); }
  void HostUnregister(void*) override {}

  Result<DStream> StreamCreate(unsigned, int) override {
    auto* s = new int(0);
    streams_.insert(s);
    return static_cast<DStream>(s);
  }
  Status StreamDestroy(DStream s) override {
    if (streams_.erase(s) == 0) return Error(Err::kInvalidResourceHandle, "unknown emulated stream");
    delete static_cast<int*>(s);
    return Status::Ok();
  }
  Status StreamQuery(DStream) override { return Status::Ok(); }
  Status StreamWaitEvent(DStream, DEvent e, unsigned) override {
    return events_.count(e) ? Status::Ok() : Error(Err::kInvalidResourceHandle, "unknown emulated event");
  }

  Result<DEvent> EventCreate(unsigned flags) override {
    auto* e = new EmuEvent{flags};
    events_.insert(e);
    return static_cast<DEvent>(e);
  }
  Status EventDestroy(DEvent e) override {
    if (events_.erase(e) == 0) return Error(Err::kInvalidResourceHandle, "unknown emulated event");
    delete static_cast<EmuEvent*>(e);
    return Status::Ok();
  }
  Status EventRecord(DEvent e, DStream) override {
    auto* ev = static_cast<EmuEvent*>(e);
    ev->recorded = true;
    ev->nanos = MonotonicNanos();
    return Status::Ok();
  }
  Status EventQuery(DEvent) override { return Status::Ok(); }
  Result<float> EventElapsedMs(DEvent a, DEvent b) override {
    auto* x = static_cast<EmuEvent*>(a);
    auto* y = static_cast<EmuEvent*>(b);
    if ((x->flags | y->flags) & CU_EVENT_DISABLE_TIMING)
      return Error(Err::kInvalidResourceHandle, "event created with cudaEventDisableTiming");
    if (!x->recorded || !y->recorded) return Error(Err::kInvalidResourceHandle, "event was never recorded");
    return static_cast<float>(static_cast<double>(static_cast<int64_t>(y->nanos - x->nanos)) / 1e6);
  }

  ~HostDriver() override {
    for (auto* s : streams_) delete static_cast<int*>(s);
    for (auto* e : events_) delete static_cast<EmuEvent*>(e);
  }

 private:
  Result<EmulatedHeap*> HeapOf(DevPtr p) {
    for (auto& h : heaps_)
      if (h.Owns(p)) return &h;
    return Error(Err::kInvalidValue, "0x{:x} is not emulated device memory", p);
  }
  Result<std::byte*> Translate(DevPtr p, uint64_t n) {
    ASSIGN_OR_RETURN(EmulatedHeap * h, HeapOf(p));
    return h->Translate(p, n);
  }

  HostDriverOptions options_;
  std::vector<EmulatedHeap> heaps_;
  int current_ = 0;
  std::unordered_set<void*> streams_;
  std::unordered_set<void*> events_;
};

}  // namespace

std::unique_ptr<Driver> MakeHostDriver(const HostDriverOptions& options) {
  return std::make_unique<HostDriver>(options);
}

}  // namespace remora::worker
