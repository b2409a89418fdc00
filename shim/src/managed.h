// Unified (managed) memory in the client. A managed allocation is device memory on the server
// and, at the same address in this process, a shadow the application's host code reads and
// writes ("identity VA": pointers stored inside the data stay valid on both sides). The
// shadow is a memfd mapped twice: at the allocation's address, with its protection tracking
// what the host may see, and once more read-write for the shim's own transfers (so the shim
// never touches a protected page). Over shm the memfd is also shared with the worker, and the
// transfers are DMA straight between it and device memory.
//
// Coherence (CUDA's rule for devices without concurrent managed access, which Remora
// reports: concurrentManagedAccess = 0): the host may touch managed memory only while the
// device does not use it; a host access that faults while work sent since the last wait may
// still run first waits for the device (WaitForDeviceLocked), so a program that touches it
// from both sides at once gets one of the orders concurrent access allows. Per 64 KiB chunk:
//   clean    (read-only)   the host copy equals the device's
//   dirty    (read-write)  the host wrote it since the last flush
//   invalid  (no access)   the device may have changed it since the host last fetched it
// A write to a clean chunk makes it dirty (one fault per chunk); before any work that may read
// device memory is sent, dirty chunks are flushed to the device (and become clean); after a
// call that waits for the device, clean chunks become invalid if work was sent since the last
// such call; touching an invalid chunk fetches it (with read-ahead that doubles on sequential
// faults, up to 4 MiB). The fault handler (SIGSEGV) passes every other fault to the handler
// that was installed before it.
//
// Owned by the Runtime. Thread-safe; the fault handler runs on the faulting thread and takes
// the same lock, which no code holds while touching a shadow page.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "remora/base/status.h"

namespace remora::shim {

class Client;

class ManagedMemory {
 public:
  static constexpr uint64_t kChunk = 64 << 10;

  // Makes [base, base + size) managed: device memory of `device` (the allocation the worker
  // knows begins at `device_base`), zeroed here, and its shadow mapped at `base`.
  // kMemoryAllocation if the address is taken in this process.
  Status Add(Client* c, uint64_t base, uint64_t size, int device, uint64_t device_base);
  // Pinned memory of a transport without shared memory (api_pinned.cc, HostAlloc): device
  // memory of `device` at the same address as host memory mapped at `base`, asleep - plain
  // host memory to every copy and access, never flushed or invalidated, unknown to Contains -
  // until a kernel is handed an address in it (Wake). From then on it is managed memory,
  // the host's bytes pushed before the device's next work (or synchronisation), except that
  // a host access does not wait for the device: pinned memory may be used by both at once
  // (XLA's timer releases a kernel that spins on it).
  Status AddPinned(Client* c, uint64_t base, uint64_t size, int device, uint64_t device_base);
  struct Woken {
    uint64_t base, size;
    int device;
  };
  // Wakes the sleeping pinned ranges that an 8-byte word of `words` (`n` bytes, unaligned)
  // points into: a kernel's parameters, or one address.
  std::vector<Woken> Wake(const void* words, size_t n);
  bool any_asleep() const { return asleep_.load(std::memory_order_acquire) != 0; }
  // The device of the allocation at `base` if it is one (asleep or awake).
  std::optional<int> DeviceOf(uint64_t base);
  // Forgets an allocation (before its device memory is freed); returns the device base to
  // free, or 0 if `base` is not a managed allocation.
  uint64_t Remove(Client* c, uint64_t base);
  // Adopts the __managed__ variables of a module ({address, size} each, device memory the
  // module owns): their shadow starts invalid, so the first host access fetches the module's
  // initial values. Only the variables' bytes are ever transferred.
  Status AddVariables(Client* c, const std::vector<std::pair<uint64_t, uint64_t>>& vars, int device);
  // One module variable at [p, p + n) (the driver API's cuModuleGetGlobal), unless it is
  // managed here already. A variable in the pages of variables adopted before (NVVM puts a
  // module's managed variables side by side: uvmlite's xxx and yyy) joins their range.
  Status AddVariable(Client* c, uint64_t p, uint64_t n, int device);
  // Forgets the variables' range holding `p` (their module is unloaded); false if none does.
  bool RemoveVariables(Client* c, uint64_t p);
  bool Contains(uint64_t p);
  bool empty() const { return count_.load(std::memory_order_acquire) == 0; }

  // Before work that may read device memory is sent: dirty chunks go to the device. Marks
  // that the device may change managed memory.
  Status BeforeDeviceWork();
  // After a call that waited for the device returned: what the host holds may be stale.
  void AfterSync();
  // cudaMemPrefetchAsync to a device: the range's dirty chunks go there now.
  Status Flush(uint64_t p, uint64_t n);

  // Installs the fault handler (once per process).
  static void InstallHandler();
  // Called by the handler: true if `addr` was managed and is now accessible.
  bool OnFault(uint64_t addr, bool write);

  // What cudaMemAdvise set, for cudaMemRangeGetAttribute.
  struct Advice {
    int read_mostly = 0;
    int preferred = -2;                // cudaInvalidDeviceId
    std::vector<int> accessed_by;
    int last_prefetch = -2;
  };
  Result<Advice*> AdviceFor(uint64_t p, uint64_t n);

 private:
  enum State : uint8_t { kClean = 0, kDirty = 1, kInvalid = 2 };
  struct Range {
    uint64_t base = 0, size = 0;  // whole chunks
    uint64_t device_base = 0;     // the worker's allocation (0: a module's, never freed here)
    std::vector<std::pair<uint64_t, uint64_t>> windows;  // [begin, end) that hold device data
    int device = 0;
    int fd = -1;
    std::byte* alias = nullptr;   // read-write view of the same memory
    uint64_t region = 0;          // shared with the worker (shm), else 0
    bool asleep = false;          // pinned memory no kernel was handed yet (AddPinned)
    bool pinned = false;          // pinned memory (AddPinned), asleep or awake: host and device
                                  // may use it at once, so a host access never waits for the device
    std::vector<uint8_t> state;   // per chunk
    uint64_t next_expected = 0;   // read-ahead: the chunk after the last fetch
    uint64_t readahead = kChunk;
    Advice advice;
  };
  // A range of an allocation at `base` (chunk aligned, else kMemoryAllocation).
  static Result<std::unique_ptr<Range>> NewRange(uint64_t base, uint64_t size, int device, uint64_t device_base);
  Status Map(Client* c, Range* r, State initial);
  Range* FindLocked(uint64_t p);  // awake ranges only
  Range* FindAnyLocked(uint64_t p);
  // Transfers between the shadow and device memory (caller holds mu_).
  Status Push(Range& r, uint64_t off, uint64_t n);
  Status Pull(Range& r, uint64_t off, uint64_t n);
  void Protect(Range& r, uint64_t first, uint64_t count, State s);
  Status FlushLocked(Range& r, uint64_t first, uint64_t last);
  // The host touches managed memory: if work was sent since the last wait, waits until every
  // device of the session has done it and invalidates the clean chunks (OnFault).
  Status WaitForDeviceLocked();
  Result<uint64_t> Stream(int device);

  std::mutex mu_;
  std::map<uint64_t, std::unique_ptr<Range>> ranges_;  // by base
  std::atomic<int> count_{0};   // awake ranges
  std::atomic<int> asleep_{0};  // sleeping ones
  // Bounds of every sleeping range ever added (never shrunk): most words a kernel is handed
  // fall outside, and Wake takes no lock for them.
  std::atomic<uint64_t> asleep_lo_{UINT64_MAX}, asleep_hi_{0};
  std::atomic<bool> dirty_{false};            // some chunk is dirty
  std::atomic<uint64_t> work_epoch_{0};       // bumped by every BeforeDeviceWork
  uint64_t invalidated_epoch_ = 0;            // work_epoch_ at the last invalidation (under mu_)
  std::map<int, uint64_t> streams_;      // the shim's own non-blocking stream per device
  Client* client_ = nullptr;
};

// The runtime's side (api_managed.cc). Device memory at an address mapped here, managed
// (cudaMallocManaged) or, with `pinned`, sleeping pinned memory (AddPinned).
Result<void*> AllocateManaged(size_t size, const char* call, bool pinned = false);
// Frees managed memory at `p` (sleeping pinned memory too with `pinned`): false if it is none.
bool FreeManaged(Client* c, void* p, Status* st, bool pinned = false);
// Wakes the sleeping pinned memory `n` bytes of words at `words` point into (a kernel's
// parameters, or one address), and enters it in the device table.
Status WakePinned(const void* words, size_t n);

}  // namespace remora::shim
