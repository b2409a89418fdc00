#include "remora/memmgr/allocation_table.h"

#include <algorithm>

namespace remora {

Status AllocationTable::Insert(const Allocation& a) {
  if (a.size == 0) return Error(Err::kInvalidValue, "empty allocation");
  if (a.base + a.size < a.base) return Error(Err::kInvalidValue, "allocation wraps the address space");
  auto next = map_.lower_bound(a.base);
  if (next != map_.end() && next->first < a.base + a.size)
    return Error(Err::kInvalidValue, "allocation 0x{:x}+{} overlaps 0x{:x}", a.base, a.size, next->first);
  if (next != map_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second.size > a.base)
      return Error(Err::kInvalidValue, "allocation 0x{:x}+{} overlaps 0x{:x}", a.base, a.size, prev->first);
  }
  map_.emplace(a.base, a);
  total_ += a.size;
  return Status::Ok();
}

Result<uint64_t> AllocationTable::InsertMerging(Allocation a, const std::function<bool(const Allocation&)>& mergeable) {
  Status inserted = Insert(a);
  if (inserted.ok()) return a.base;
  if (a.size == 0 || a.base + a.size < a.base) return inserted;
  std::vector<Allocation> overlapping;
  auto first = map_.lower_bound(a.base);  // the first starting at or after a
  if (first != map_.begin()) {            // the one starting before a, if it reaches into it
    auto prev = std::prev(first);
    if (prev->first + prev->second.size > a.base) overlapping.push_back(prev->second);
  }
  for (auto it = first; it != map_.end() && it->first < a.base + a.size; ++it) overlapping.push_back(it->second);
  for (const Allocation& e : overlapping)
    if (!mergeable(e)) return inserted;
  Allocation merged = a;
  for (const Allocation& e : overlapping) {
    uint64_t end = std::max(merged.base + merged.size, e.base + e.size);
    merged.base = std::min(merged.base, e.base);
    merged.size = end - merged.base;
    merged.reserved += e.reserved;
  }
  for (const Allocation& e : overlapping) (void)Erase(e.base);
  Status st = Insert(merged);  // cannot fail: the union overlaps only what was erased
  if (!st.ok()) {
    for (const Allocation& e : overlapping) (void)Insert(e);
    return st;
  }
  return merged.base;
}

Result<Allocation> AllocationTable::Erase(uint64_t base) {
  auto it = map_.find(base);
  if (it == map_.end()) {
    if (Find(base)) return Error(Err::kInvalidValue, "0x{:x} is inside an allocation, not its start", base);
    return Error(Err::kInvalidValue, "0x{:x} is not an allocation of this session", base);
  }
  Allocation a = it->second;
  if (a.kind == AllocKind::kVirtual) {  // its mappings go with it
    auto m = mapped_.lower_bound(a.base);
    while (m != mapped_.end() && m->first < a.base + a.size) m = mapped_.erase(m);
  }
  map_.erase(it);
  total_ -= a.size;
  return a;
}

std::optional<Allocation> AllocationTable::Find(uint64_t ptr) const {
  auto it = map_.upper_bound(ptr);
  if (it == map_.begin()) return std::nullopt;
  --it;
  if (ptr - it->first < it->second.size) return it->second;
  return std::nullopt;
}

Result<Allocation> AllocationTable::CheckRange(uint64_t ptr, uint64_t len) const {
  std::optional<Allocation> a = Find(ptr);
  if (!a) return Error(Err::kInvalidValue, "0x{:x} is not device memory of this session", ptr);
  uint64_t room = a->base + a->size - ptr;
  if (len > room)
    return Error(Err::kInvalidValue, "{} bytes at 0x{:x} run past the end of its {}-byte allocation at 0x{:x}", len, ptr,
                 a->size, a->base);
  if (a->kind != AllocKind::kVirtual) return *a;
  // The mappings from the one holding ptr must follow each other up to ptr + len.
  uint64_t at = ptr, end = ptr + std::max<uint64_t>(len, 1);
  auto it = mapped_.upper_bound(ptr);
  if (it != mapped_.begin()) {
    for (--it; it != mapped_.end() && it->first <= at && at < end; ++it) at = std::max(at, it->first + it->second);
  }
  if (at < end) return Error(Err::kInvalidValue, "0x{:x} is reserved address space with no memory mapped", at);
  return *a;
}

Status AllocationTable::AddMapping(uint64_t base, uint64_t size) {
  if (size == 0 || base + size < base) return Error(Err::kInvalidValue, "empty mapping");
  std::optional<Allocation> a = Find(base);
  if (!a || a->kind != AllocKind::kVirtual || size > a->base + a->size - base)
    return Error(Err::kInvalidValue, "0x{:x}+{} is not inside a reserved range", base, size);
  auto next = mapped_.lower_bound(base);
  if ((next != mapped_.end() && next->first < base + size) ||
      (next != mapped_.begin() && std::prev(next)->first + std::prev(next)->second > base))
    return Error(Err::kInvalidValue, "0x{:x}+{} overlaps a mapping", base, size);
  mapped_.emplace(base, size);
  return Status::Ok();
}

Status AllocationTable::RemoveMapping(uint64_t base, uint64_t size) {
  auto it = mapped_.find(base);
  if (it == mapped_.end() || it->second != size) return Error(Err::kInvalidValue, "0x{:x}+{} is not a mapping", base, size);
  mapped_.erase(it);
  return Status::Ok();
}

std::vector<Allocation> AllocationTable::All() const {
  std::vector<Allocation> out;
  out.reserve(map_.size());
  for (auto& [_, a] : map_) out.push_back(a);
  return out;
}

}  // namespace remora
