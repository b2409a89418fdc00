// One tenant's cache of module images (fat binaries), kept across its sessions so repeated
// runs ship nothing (docs/SECURITY.md, F1).
//
// Contract:
//  - Entries are named by the BLAKE2b-256 of their bytes, computed by this server; Read
//    recomputes it, so an entry can only ever serve the bytes that hash to its name.
//  - The directory is the tenant's own (the supervisor opens it and hands this worker its
//    descriptor): no tenant sees, loads or replaces another tenant's entries.
//  - Store never replaces an entry (link(2) of a private temporary file), and is only called
//    after the image was charged to the tenant and loaded successfully.
//  - The directory stays within `budget_bytes`: Store evicts the least recently used
//    entries first, and skips images larger than the budget.
// Thread-safety: none (the executor's thread). Several workers of one tenant may share the
// directory; every operation is safe against the others' concurrent ones.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "remora/base/fd.h"

namespace remora::worker {

inline constexpr size_t kModuleHashBytes = 32;

// BLAKE2b-256 of `data`, as 64 hex digits.
std::string ModuleHashHex(const void* data, size_t size);

class ModuleCache {
 public:
  // `dir` is the tenant's cache directory (owned from here on).
  ModuleCache(Fd dir, uint64_t budget_bytes) : dir_(std::move(dir)), budget_(budget_bytes) {}

  // The cached image named `hash_hex` of exactly `size` bytes whose content still hashes to
  // its name, or empty. Marks the entry as recently used.
  std::vector<std::byte> Read(const std::string& hash_hex, uint64_t size);
  // Adds the image (its hash already verified by the caller) unless present; best effort.
  void Store(const std::string& hash_hex, const std::vector<std::byte>& image);

  // Bytes the directory holds now (regular files only).
  uint64_t UsedBytes();

 private:
  // Removes least recently used entries until `incoming` more bytes fit the budget.
  void MakeRoom(uint64_t incoming);

  Fd dir_;
  uint64_t budget_;
};

}  // namespace remora::worker
