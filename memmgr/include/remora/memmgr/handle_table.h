// Opaque 64-bit handles for per-session objects (streams, events, modules, functions).
// A handle encodes its kind in the top byte so a stream id passed as an event is rejected;
// ids are never reused within a table. Not thread-safe.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "remora/base/status.h"

namespace remora {

enum class HandleKind : uint8_t {
  kStream = 0x51,
  kEvent = 0x52,
  kModule = 0x53,
  kFunction = 0x54,
  kVariable = 0x55,
  kPool = 0x56,
  kPhysical = 0x57,  // cuMemCreate's physical memory (CUmemGenericAllocationHandle)
  kLink = 0x58,      // a JIT link state (cuLinkCreate)
  // 0x59-0x5f: the driver API; 0x60-0x6f: graphs, arrays, textures...; 0x70-0x8f: libraries
};

const char* HandleKindName(HandleKind kind);

template <typename T>
class HandleTable {
 public:
  explicit HandleTable(HandleKind kind) : kind_(kind) {}

  uint64_t Insert(T value) {
    uint64_t id = (uint64_t{static_cast<uint8_t>(kind_)} << 56) | (next_++ << 4);
    map_.emplace(id, std::move(value));
    return id;
  }
  // nullptr if `id` is not a live handle of this table.
  T* Find(uint64_t id) {
    auto it = map_.find(id);
    return it == map_.end() ? nullptr : &it->second;
  }
  Result<T*> Get(uint64_t id) {
    if (T* v = Find(id)) return v;
    return Error(Err::kInvalidValue, "0x{:x} is not a {} of this session", id, HandleKindName(kind_));
  }
  bool Erase(uint64_t id) { return map_.erase(id) > 0; }
  // Forgets every handle (ids are still never reused).
  void Clear() { map_.clear(); }
  size_t size() const { return map_.size(); }
  template <typename Fn>
  void ForEach(Fn&& fn) {
    for (auto& [id, v] : map_) fn(id, v);
  }
  std::vector<uint64_t> Ids() const {
    std::vector<uint64_t> ids;
    for (auto& [id, _] : map_) ids.push_back(id);
    return ids;
  }

 private:
  HandleKind kind_;
  uint64_t next_ = 1;
  std::unordered_map<uint64_t, T> map_;
};

}  // namespace remora
