// LibObjects: the client's view of the objects math libraries create for the application
// (cuBLAS handles, cuDNN descriptors, cuFFT plans, ...). Their ids are minted here, so that a
// call creating one can be posted without waiting for the server; the worker registers the
// library's real object under the same id and checks every later use (it is authoritative).
// Beside each object the client mirrors the little state its calls must know before they
// are sent: the pointer mode of its scalars, a digest of its content - the call that created
// it and every call that changed it since, with the objects they named replaced by their own
// digests - under which size and heuristic queries are memoised (so a descriptor made afresh
// for each GEMM with the same settings finds the answer of the last one), and a few
// library-specific values (`aux`: a cuBLASLt descriptor's scale type, ...).
//
// An id is (kind << 56) | (n << 4), n counting from 1 in the process; a library whose
// handles are ints (cufftHandle) shows the application n and sends the id it stands for.
//
// Owned by the process root (process.h). Thread-safe; cheap (one mutex, a hash lookup).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "remora/base/status.h"
#include "remora/memmgr/handle_table.h"

namespace remora::shim {

// Whether `kind` is a library object kind (handle_table.h).
constexpr bool IsLibraryKind(HandleKind kind) {
  return static_cast<uint8_t>(kind) >= kFirstLibraryKind && static_cast<uint8_t>(kind) <= kLastLibraryKind;
}
constexpr uint64_t LibraryObjectId(HandleKind kind, uint64_t n) { return (uint64_t{static_cast<uint8_t>(kind)} << 56) | (n << 4); }

struct LibObjectView {
  HandleKind kind{};
  int device = 0;
  uint32_t mode = 0;      // pointer-mode bits: bit i set = scalar slot i is a device pointer
  uint64_t content = 0;   // digest of the calls that made the object what it is
  std::array<int64_t, 4> aux{};
};

class LibObjects {
 public:
  // A fresh id of `kind`, never handed out before in this process.
  uint64_t Mint(HandleKind kind);
  void Add(uint64_t id, HandleKind kind, int device, uint64_t content);
  void Remove(uint64_t id);
  // kInvalidResourceHandle unless `id` is a live object of `kind` of this process.
  Result<LibObjectView> Get(uint64_t id, HandleKind kind) const;
  // The object's state, or nullopt (never fails: for the mirror hooks).
  std::optional<LibObjectView> Find(uint64_t id) const;
  void SetContent(uint64_t id, uint64_t content);
  void SetMode(uint64_t id, uint32_t mode);
  void SetAux(uint64_t id, size_t slot, int64_t value);
  // Lets `alias` (the address of descriptor storage the application owns: cublasLt*Init)
  // stand for the object `id` in every lookup above (replacing what it stood for).
  void Alias(uint64_t alias, uint64_t id);
  // The object an id or an alias names (the id itself when it is no alias).
  uint64_t Resolve(uint64_t id) const;
  // Forgets every object (a device reset): the server's went with them.
  void Clear();
  // In a forked child: the parent's objects are not the child's (another thread of the
  // parent may have held the lock at fork time).
  void AfterFork();

  // Memoised results of size and heuristic queries, by a key of the call's function, device
  // and argument bytes (objects by their content digests). Bounded: forgets all when full.
  std::optional<std::vector<std::byte>> Recall(const std::string& key) const;
  void Remember(std::string key, std::vector<std::byte> result);

 private:
  static constexpr size_t kMaxMemo = 4096;
  mutable std::mutex mu_;
  std::atomic<uint64_t> next_{1};
  uint64_t ResolveLocked(uint64_t id) const {
    auto a = aliases_.find(id);
    return a == aliases_.end() ? id : a->second;
  }
  std::unordered_map<uint64_t, LibObjectView> objects_;
  std::unordered_map<uint64_t, uint64_t> aliases_;  // application storage -> object id
  std::unordered_map<std::string, std::vector<std::byte>> memo_;
};

}  // namespace remora::shim
