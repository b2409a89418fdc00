// Address-range table: which [base, base+size) ranges belong to a session, and pointer
// validation against them. Pure code. Not thread-safe: callers serialize access.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <vector>

#include "remora/base/status.h"

namespace remora {

enum class AllocKind : uint8_t {
  kDevice = 0,      // cudaMalloc / pitch / 3D
  kDeviceAsync = 1, // cudaMallocAsync (stream ordered)
  kPinnedHost = 2,  // cudaMallocHost / cudaHostAlloc
  kRegisteredHost = 3,  // cudaHostRegister
  kModule = 4,      // memory held by a loaded module
  kVirtual = 5,     // an address range reserved with cuMemAddressReserve (memory mapped into it)
  kGraphStaging = 6,  // a graph's staging of host memory (freed with the graphs binding it)
  kManaged = 7,     // cudaMallocManaged / cudaHostAlloc(Mapped) emulated as managed memory
  kMappedHost = 8,  // pinned host memory the device reads directly (cudaHostGetDevicePointer)
  kGraphMemory = 9, // allocated by a graph's memory node (lives as long as the graph's memory)
  kIpcImported = 16,  // another session's memory opened by CUDA IPC (closed, never freed; not charged here)
};

struct Allocation {
  uint64_t base = 0;
  uint64_t size = 0;
  int32_t device = 0;      // server-side GPU index (or app ordinal, per the table's owner)
  AllocKind kind = AllocKind::kDevice;
  uint64_t reserved = 0;   // bytes charged to the ledger for it
  uint64_t cookie = 0;     // owner-defined (e.g. the host mapping of an emulated allocation)
  bool placed = false;     // put at an address the owner chose (a migration), not the allocator's
};

class AllocationTable {
 public:
  // Fails with kInvalidValue if the range is empty or overlaps an existing allocation.
  Status Insert(const Allocation& a);
  // Insert(a), or where `a` overlaps only allocations `mergeable` accepts, one entry in their
  // place: the union of their ranges and a's, with a's fields and the sum of their `reserved`
  // (the driver gives a graph's allocation node a range its graph freed before: worker and
  // shim keep such memory as one entry). Returns the entry's base; on failure (an overlap
  // `mergeable` refuses, an empty range) nothing changed.
  Result<uint64_t> InsertMerging(Allocation a, const std::function<bool(const Allocation&)>& mergeable);
  // Removes the allocation whose base is exactly `base`; kInvalidValue otherwise (CUDA's
  // answer to freeing an interior or unknown pointer).
  Result<Allocation> Erase(uint64_t base);
  // The allocation containing `ptr`, if any.
  std::optional<Allocation> Find(uint64_t ptr) const;
  // Checks that [ptr, ptr + len) lies inside one allocation (len 0 allowed for a valid ptr);
  // inside a reserved range (kVirtual) the bytes must also be mapped.
  Result<Allocation> CheckRange(uint64_t ptr, uint64_t len) const;

  // Memory mapped into a kVirtual range (cuMemMap): [base, base + size) must lie inside one
  // and not overlap another mapping. Ranges spanning adjacent mappings are valid.
  Status AddMapping(uint64_t base, uint64_t size);
  Status RemoveMapping(uint64_t base, uint64_t size);

  size_t size() const { return map_.size(); }
  uint64_t total_bytes() const { return total_; }
  std::vector<Allocation> All() const;
  void Clear() {
    map_.clear();
    mapped_.clear();
    total_ = 0;
  }

 private:
  std::map<uint64_t, Allocation> map_;
  std::map<uint64_t, uint64_t> mapped_;  // mapping base -> size, inside kVirtual ranges
  uint64_t total_ = 0;
};

}  // namespace remora
