// Internals of the host-emulated backend (host_driver.h and its driver-API emulation): the
// emulated device memory of one GPU and the emulated streams (worker/backend/host/emu_streams.h). Private to server/worker.
#pragma once

#include <cuda.h>  // enum values only; nothing is linked
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "remora/base/fd.h"
#include "remora/base/util.h"
#include "worker/backend/driver.h"
#include "worker/backend/host/image_symbols.h"
#include "worker/backend/host/emu_streams.h"  // EmuStream, EmuDep: a fixed pool of threads

namespace remora::worker::host {

// Fake device addresses start here, 1 TiB apart per emulated GPU: far from where Linux
// places executables, heaps and mmaps, so they do not alias the client's host pointers.
// A session in window w (Hello.window) has its GPUs' addresses w windows of 16 GPUs further
// (from 48 TiB on, past the 47-bit user address space from window 6 on: no host pointer is
// there either), so two servers' device pointers never collide in one application.
constexpr uint64_t kDeviceBase = 0x200000000000ull;
constexpr uint64_t kDeviceStride = 1ull << 40;
constexpr int kMaxGpusPerWindow = 16;
constexpr uint64_t kWindowStride = kDeviceStride * kMaxGpusPerWindow;
constexpr uint64_t DeviceBase(uint8_t window, int gpu) {
  return kDeviceBase + uint64_t{window} * kWindowStride + static_cast<uint64_t>(gpu) * kDeviceStride;
}
constexpr uint64_t kAlign = 512;

struct Block {
  std::byte* host;
  uint64_t size;
};

// Freed memory whose host address stream work queued before the free still holds: the host
// mapping of freed device memory, or a freed host buffer (HostAlloc). Kept until the streams
// that had work queued at the free have run that far; unmapped or freed when destroyed.
// `device`: the emulated GPU whose memory it was (its bytes still count against that GPU's
// capacity, as asynchronously freed memory does on a GPU until its stream reaches the free),
// or -1 (host memory, a client's region, a reservation).
class RetiredMemory {
 public:
  enum class Release { kUnmap, kFree };
  RetiredMemory(Block b, Release how, std::vector<EmuDep> until, int device = -1)
      : block_(b), how_(how), until_(std::move(until)), device_(device) {}
  RetiredMemory(RetiredMemory&& o) noexcept
      : block_(std::exchange(o.block_, Block{nullptr, 0})), how_(o.how_), until_(std::move(o.until_)), device_(o.device_) {}
  RetiredMemory& operator=(RetiredMemory&& o) noexcept {
    std::swap(block_, o.block_);
    std::swap(how_, o.how_);
    std::swap(until_, o.until_);
    std::swap(device_, o.device_);
    return *this;
  }
  // Device memory's bytes held for `device`, else 0.
  uint64_t HeldOn(int device) const { return device_ == device && block_.host != nullptr ? block_.size : 0; }
  ~RetiredMemory() {
    if (block_.host == nullptr) return;
    if (how_ == Release::kUnmap) ::munmap(block_.host, block_.size);
    else std::free(block_.host);
  }
  bool Due() const {
    for (const EmuDep& d : until_)
      if (d.stream->completed.load() < d.target) return false;
    return true;
  }

 private:
  Block block_;
  Release how_;
  std::vector<EmuDep> until_;
  int device_;
};

// An address range of cuMemAddressReserve: host address space of the same size (no access),
// into which memory files are mapped, so a range spanning mappings is contiguous here too.
struct Reserved {
  uint64_t size;
  std::byte* host;
  std::map<DevPtr, uint64_t> mapped;  // mapping start -> bytes
};

// First-fit allocator over one emulated GPU's address range.
class EmulatedHeap {
 public:
  EmulatedHeap(uint64_t base, uint64_t capacity) : base_(base), capacity_(capacity) { free_[base] = capacity; }

  Result<DevPtr> Alloc(uint64_t bytes) {
    uint64_t need = AlignUp(std::max<uint64_t>(bytes, 1), kAlign);
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < need) continue;
      return Take(it, it->first, need);
    }
    return Error(Err::kMemoryAllocation, "emulated GPU is out of memory ({} requested, {} of {} in use)",
                 FormatSize(bytes), FormatSize(used_), FormatSize(capacity_));
  }
  // An allocation at exactly `at` (planned migration: the address it had on another server),
  // if that range is free.
  Result<DevPtr> AllocAt(DevPtr at, uint64_t bytes) {
    if (bytes > capacity_ || at % kAlign != 0)
      return Error(Err::kMemoryAllocation, "emulated GPU: 0x{:x}+{} cannot be placed here", at, bytes);
    uint64_t need = AlignUp(std::max<uint64_t>(bytes, 1), kAlign);
    auto it = free_.upper_bound(at);
    if (at <= ~uint64_t{0} - need && it != free_.begin()) {
      --it;
      if (it->first <= at && at + need <= it->first + it->second) return Take(it, at, need);
    }
    return Error(Err::kMemoryAllocation, "emulated GPU: 0x{:x}+{} is not free address range", at, FormatSize(bytes));
  }

  // A virtual range with no memory (cuMemAddressReserve); memory is mapped into it later.
  Result<DevPtr> ReserveRange(uint64_t bytes, uint64_t align) {
    uint64_t need = AlignUp(std::max<uint64_t>(bytes, 1), kAlign);
    align = std::max<uint64_t>(align, kAlign);
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      DevPtr start = AlignUp(it->first, align);
      if (start + need > it->first + it->second) continue;
      void* host = ::mmap(nullptr, need, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (host == MAP_FAILED) return Error(Err::kMemoryAllocation, "emulated reservation: host mmap of {} failed", FormatSize(need));
      DevPtr fbase = it->first;
      uint64_t fsize = it->second;
      free_.erase(it);
      if (start > fbase) free_[fbase] = start - fbase;
      if (start + need < fbase + fsize) free_[start + need] = fbase + fsize - (start + need);
      reserved_[start] = Reserved{need, static_cast<std::byte*>(host), {}};
      return start;
    }
    return Error(Err::kMemoryAllocation, "emulated GPU has no free address range of {}", FormatSize(bytes));
  }
  // The address range is free at once; its host address space is the caller's to unmap.
  Result<Block> FreeRange(DevPtr base, uint64_t bytes) {
    auto it = reserved_.find(base);
    if (it == reserved_.end() || AlignUp(std::max<uint64_t>(bytes, 1), kAlign) != it->second.size)
      return Error(Err::kInvalidValue, "0x{:x}+{} is not a reserved range", base, bytes);
    if (!it->second.mapped.empty()) return Error(Err::kInvalidValue, "the range still has memory mapped");
    Block b{it->second.host, it->second.size};
    reserved_.erase(it);
    Free(base, b.size);
    return b;
  }
  Status MapAlias(DevPtr at, uint64_t bytes, int fd, uint64_t offset) {
    Reserved* r = ReservedAt(at);
    if (r == nullptr) return Error(Err::kInvalidValue, "0x{:x} is not in a reserved range", at);
    DevPtr rbase = ReservedBase(at);
    if (at + bytes > rbase + r->size) return Error(Err::kInvalidValue, "the mapping runs past its reserved range");
    auto next = r->mapped.lower_bound(at);
    if (next != r->mapped.end() && next->first < at + bytes) return Error(Err::kInvalidValue, "the range is already mapped");
    if (next != r->mapped.begin() && std::prev(next)->first + std::prev(next)->second > at)
      return Error(Err::kInvalidValue, "the range is already mapped");
    void* m = ::mmap(r->host + (at - rbase), bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, static_cast<off_t>(offset));
    if (m == MAP_FAILED) return Error(Err::kMemoryAllocation, "emulated mapping of {} failed", FormatSize(bytes));
    r->mapped[at] = bytes;
    return Status::Ok();
  }
  Status UnmapAlias(DevPtr at, uint64_t bytes) {
    Reserved* r = ReservedAt(at);
    if (r == nullptr) return Error(Err::kInvalidValue, "0x{:x}+{} is not a mapping", at, bytes);
    auto it = r->mapped.find(at);
    if (it == r->mapped.end() || it->second != bytes) return Error(Err::kInvalidValue, "0x{:x}+{} is not a mapping", at, bytes);
    // Back to reserved address space without memory as far as Translate is concerned; the host
    // pages stay writable (anonymous, untouched until written) for stream work queued before
    // the unmap, which holds their address (RetiredMemory's reason, for a range kept reserved).
    ::mmap(r->host + (at - ReservedBase(at)), bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
           -1, 0);
    r->mapped.erase(it);
    return Status::Ok();
  }

  // The address range is free (and may be allocated again) at once; the block's host mapping
  // is the caller's to unmap.
  Result<Block> Release(DevPtr p) {
    auto it = blocks_.find(p);
    if (it == blocks_.end()) return Error(Err::kInvalidValue, "0x{:x} is not an emulated allocation", p);
    Block b = it->second;
    blocks_.erase(it);
    shared_.erase(p);
    uint64_t size = AlignUp(std::max<uint64_t>(b.size, 1), kAlign);  // an imported block records its exact size
    if (imported_.erase(p) == 0) used_ -= size;  // another process's memory is not this GPU's use
    Free(p, size);
    return b;
  }

  // CUDA IPC. The allocation at `p` becomes a memory file mapped at the same host address
  // (its contents copied; the caller makes sure no stream touches it meanwhile), so another
  // process can map the same memory; returns a descriptor of it (the caller's to close).
  Result<int> Share(DevPtr p) {
    auto it = blocks_.find(p);
    if (it == blocks_.end()) return Error(Err::kInvalidValue, "0x{:x} is not the start of an emulated allocation", p);
    auto sh = shared_.find(p);
    if (sh == shared_.end()) {
      Block& b = it->second;
      Fd fd(::memfd_create("remora-emulated-ipc", MFD_CLOEXEC));
      if (!fd || ::ftruncate(fd.get(), static_cast<off_t>(b.size)) != 0)
        return ErrnoStatus(Err::kMemoryAllocation, "emulated IPC memory file", errno);
      void* tmp = ::mmap(nullptr, b.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
      if (tmp == MAP_FAILED) return ErrnoStatus(Err::kMemoryAllocation, "emulated IPC memory file", errno);
      std::memcpy(tmp, b.host, b.size);
      ::munmap(tmp, b.size);
      if (::mmap(b.host, b.size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd.get(), 0) == MAP_FAILED)
        return ErrnoStatus(Err::kMemoryAllocation, "emulated IPC memory remap", errno);
      sh = shared_.emplace(p, std::move(fd)).first;
    }
    int dup = ::fcntl(sh->second.get(), F_DUPFD_CLOEXEC, 0);
    if (dup < 0) return ErrnoStatus(Err::kMemoryAllocation, "dup", errno);
    return dup;
  }
  // Maps another process's shared memory (Share) of `bytes` as an allocation of this GPU.
  Result<DevPtr> MapShared(int fd, uint64_t bytes) {
    uint64_t need = AlignUp(std::max<uint64_t>(bytes, 1), kAlign);
    struct stat st;
    if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < bytes)
      return Error(Err::kInvalidResourceHandle, "the exported memory is smaller than its export says");
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < need) continue;
      DevPtr p = it->first;
      void* host = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (host == MAP_FAILED) return ErrnoStatus(Err::kMemoryAllocation, "map emulated IPC memory", errno);
      uint64_t left = it->second - need;
      free_.erase(it);
      if (left > 0) free_[p + need] = left;
      blocks_[p] = Block{static_cast<std::byte*>(host), bytes};
      imported_.insert(p);
      return p;
    }
    return Error(Err::kMemoryAllocation, "emulated GPU has no free address range of {}", FormatSize(bytes));
  }

  // Host address of [p, p+n), which must lie inside one allocation, or inside the mapped part
  // of one reserved range.
  Result<std::byte*> Translate(DevPtr p, uint64_t n) {
    auto it = blocks_.upper_bound(p);
    if (it != blocks_.begin()) {
      --it;
      uint64_t off = p - it->first;
      if (off < it->second.size) {
        if (n > it->second.size - off) return Error(Err::kInvalidValue, "0x{:x}+{} is outside emulated device memory", p, n);
        return it->second.host + off;
      }
    }
    Reserved* r = ReservedAt(p);
    if (r == nullptr) return Error(Err::kInvalidValue, "0x{:x} is not emulated device memory", p);
    DevPtr rbase = ReservedBase(p);
    // The mappings must cover [p, p + n) back to back.
    uint64_t at = p, end = p + n;
    auto m = r->mapped.upper_bound(p);
    if (m == r->mapped.begin()) return Error(Err::kInvalidValue, "0x{:x} is reserved but not mapped", p);
    for (--m; m != r->mapped.end() && m->first <= at && at < end; ++m) at = std::max(at, m->first + m->second);
    if (at < end) return Error(Err::kInvalidValue, "0x{:x} is reserved but not mapped", at);
    return r->host + (p - rbase);
  }

  bool Owns(DevPtr p) const { return p >= base_ && p < base_ + kDeviceStride; }
  uint64_t used() const { return used_; }
  uint64_t capacity() const { return capacity_; }

 private:
  // Carves [p, p + need) out of free range `it` and backs it with host memory.
  Result<DevPtr> Take(std::map<DevPtr, uint64_t>::iterator it, DevPtr p, uint64_t need) {
    DevPtr fbase = it->first;
    uint64_t fsize = it->second;
    free_.erase(it);
    if (p > fbase) free_[fbase] = p - fbase;
    if (p + need < fbase + fsize) free_[p + need] = fbase + fsize - (p + need);
    void* host = ::mmap(nullptr, need, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (host == MAP_FAILED) {
      Free(p, need);
      return Error(Err::kMemoryAllocation, "emulated device memory: host mmap of {} failed", FormatSize(need));
    }
    blocks_[p] = Block{static_cast<std::byte*>(host), need};
    used_ += need;
    return p;
  }

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
  std::map<DevPtr, Reserved> reserved_;  // address ranges without memory of their own
  std::map<DevPtr, Fd> shared_;          // allocations shared with other processes (CUDA IPC)
  std::set<DevPtr> imported_;            // other processes' memory mapped here

  Reserved* ReservedAt(DevPtr p) {
    auto it = reserved_.upper_bound(p);
    if (it == reserved_.begin()) return nullptr;
    --it;
    return p - it->first < it->second.size ? &it->second : nullptr;
  }
  DevPtr ReservedBase(DevPtr p) { return std::prev(reserved_.upper_bound(p))->first; }
};

constexpr uint32_t kFatbinMagic = 0xBA55ED50;

// Kernels are not executed here, with one exception for testing the compute scheduler: a
// kernel whose name contains this takes gridDim.x microseconds of (emulated) GPU time. Only
// this backend knows the convention; on a GPU such a kernel is whatever its code does.
constexpr const char* kBusyKernel = "remora_emulated_busy_us";

// Whether `image` is one a driver would load: a fat binary, an ELF cubin or PTX text.
inline bool IsEmulatedImage(const void* image, size_t size, uint32_t magic) {
  const auto* b = static_cast<const unsigned char*>(image);
  if (magic == kFatbinMagic) return true;
  if (size >= 64 && b[0] == 0x7f && b[1] == 'E' && b[2] == 'L' && b[3] == 'F') return true;
  // PTX: NUL-terminated text naming its version.
  if (size < 2 || b[size - 1] != 0) return false;
  return std::string_view(reinterpret_cast<const char*>(b), size - 1).find(".version") != std::string_view::npos;
}

struct EmuModule {
  std::map<std::string, std::pair<DevPtr, size_t>> globals;
  ImageSymbols symbols;  // what the image's symbol tables define
};

struct EmuFunction {
  std::string name;
  int attrs[kNumFunctionAttributes] = {};
};

struct EmuPool {
  int device;
  std::map<int, uint64_t> attrs;
  unsigned handle_types = 0;  // CUmemAllocationHandleType bits it was created with
  bool imported = false;      // another process's pool: allocations are opened, not made
};


// An interprocess event's state, in a memory file every process that opened it maps: records
// are numbered; a record's task sets `completed` when its stream gets there.
struct IpcEventState {
  std::atomic<uint64_t> recorded{0};
  std::atomic<uint64_t> completed{0};
};

struct EmuEvent {
  unsigned flags;
  IpcEventState* shared = nullptr;  // CUDA IPC: exported or opened (a mapping of shared_fd)
  int shared_fd = -1;
  bool recorded = false;
  uint64_t nanos = 0;
  std::shared_ptr<EmuStream> stream;  // complete once its host functions up to `target` ran
  uint64_t target = 0;
};


// The emulated GPUs' memory as the driver-API emulation (host_cuda_api.cc) reaches it:
// virtual address ranges reserved without memory, and host memory mapped into them.
class HostMemory {
 public:
  virtual ~HostMemory() = default;
  virtual int CurrentDevice() const = 0;
  virtual Result<DevPtr> ReserveRange(int device, uint64_t bytes, uint64_t align) = 0;
  virtual Status FreeRange(DevPtr base, uint64_t bytes) = 0;
  // Maps [offset, offset + bytes) of memory file `fd` at `at`, inside a reserved range.
  virtual Status MapRange(DevPtr at, uint64_t bytes, int fd, uint64_t offset) = 0;
  virtual Status UnmapRange(DevPtr at, uint64_t bytes) = 0;
  // Host address of emulated device memory [p, p + n) (one block).
  virtual Result<std::byte*> HostAddress(DevPtr p, uint64_t n) = 0;
  // Runs `task` on emulated stream `s` in stream order (on a capturing stream: records it as a
  // node of `type`).
  // A task of type CU_GRAPH_NODE_TYPE_BATCH_MEM_OP may block (a stream waiting for a value):
  // it never runs on the caller's thread, and it follows the wait protocol below.
  virtual Status RunInOrder(DStream s, std::function<void()> task, CUgraphNodeType type) = 0;
  // Blocking waits: a wait takes wait_epoch() when it is issued; while it runs it counts
  // itself in active_waits() and, before each read of device memory, gives up if the epoch
  // moved (Driver::AbandonStreamWaits moves it, then waits for active_waits() to reach 0).
  // Both sides use sequentially consistent order: increment, then check.
  virtual std::atomic<uint64_t>& wait_epoch() = 0;
  virtual std::atomic<int>& active_waits() = 0;
};

}  // namespace remora::worker::host
