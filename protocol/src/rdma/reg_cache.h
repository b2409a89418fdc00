// Registration cache: address range -> registration handle (an ibv_mr in the transport, a
// fake in unit tests). Lets the requester register long-lived client memory (the
// application's pinned host buffers) once and find the registration again for every copy
// from or to any part of it, instead of registering per transfer.
//
// Ranges never overlap: registering memory that overlaps a registered range is refused
// (like cudaHostRegister). Entries live until Erase/Clear; the cache never registers or
// deregisters by itself, so it cannot go stale behind the owner's back (the owner erases an
// entry before the memory goes away). Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "remora/base/status.h"

namespace remora::rdma {

template <typename Handle>
class RegistrationCache {
 public:
  struct Entry {
    uintptr_t begin = 0;
    uintptr_t end = 0;  // one past the last byte
    Handle handle;
  };

  // The entry that covers all of [p, p + n), or nullptr. n == 0 never matches.
  const Entry* Find(const void* p, size_t n) {
    uintptr_t a = reinterpret_cast<uintptr_t>(p);
    if (n == 0 || a + n < a) return Miss();
    auto it = entries_.upper_bound(a);
    if (it == entries_.begin()) return Miss();
    --it;
    if (a + n > it->second.end) return Miss();
    hits_++;
    return &it->second;
  }

  // Adds [p, p + n) with its handle. kHostMemoryAlreadyRegistered if it overlaps an entry,
  // kInvalidValue for an empty or wrapping range.
  Status Insert(const void* p, size_t n, Handle handle) {
    uintptr_t a = reinterpret_cast<uintptr_t>(p);
    if (n == 0 || a + n < a) return Error(Err::kInvalidValue, "cannot register an empty or wrapping range");
    auto next = entries_.lower_bound(a);
    if (next != entries_.end() && next->first < a + n)
      return Error(Err::kHostMemoryAlreadyRegistered, "memory at 0x{:x} overlaps a registered range", a);
    if (next != entries_.begin() && std::prev(next)->second.end > a)
      return Error(Err::kHostMemoryAlreadyRegistered, "memory at 0x{:x} overlaps a registered range", a);
    entries_.emplace(a, Entry{a, a + n, std::move(handle)});
    return Status::Ok();
  }

  // Removes the entry that starts at p and returns its handle (nullopt if there is none).
  std::optional<Handle> Erase(const void* p) {
    auto it = entries_.find(reinterpret_cast<uintptr_t>(p));
    if (it == entries_.end()) return std::nullopt;
    std::optional<Handle> h(std::move(it->second.handle));
    entries_.erase(it);
    return h;
  }

  // Removes everything; returns the handles in address order.
  std::vector<Handle> Clear() {
    std::vector<Handle> out;
    for (auto& [a, e] : entries_) out.push_back(std::move(e.handle));
    entries_.clear();
    return out;
  }

  size_t size() const { return entries_.size(); }
  uint64_t hits() const { return hits_; }
  uint64_t misses() const { return misses_; }

 private:
  const Entry* Miss() {
    misses_++;
    return nullptr;
  }

  std::map<uintptr_t, Entry> entries_;  // by begin
  uint64_t hits_ = 0;
  uint64_t misses_ = 0;
};

}  // namespace remora::rdma
