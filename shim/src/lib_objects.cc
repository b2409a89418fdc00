#include "lib_objects.h"

#include <iterator>
#include <new>

namespace remora::shim {

uint64_t LibObjects::Mint(HandleKind kind) {
  // Ids stay below 2^31 so that libraries with int handles can show them (cufftHandle).
  return LibraryObjectId(kind, next_.fetch_add(1) & 0x7fffffffull);
}

void LibObjects::Add(uint64_t id, HandleKind kind, int device, uint64_t content) {
  std::lock_guard<std::mutex> lock(mu_);
  objects_[id] = LibObjectView{kind, device, 0, content, {}};
}

void LibObjects::Remove(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t real = ResolveLocked(id);
  objects_.erase(real);
  for (auto it = aliases_.begin(); it != aliases_.end();) it = it->second == real ? aliases_.erase(it) : std::next(it);
}

void LibObjects::Alias(uint64_t alias, uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  aliases_[alias] = id;
}

uint64_t LibObjects::Resolve(uint64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return ResolveLocked(id);
}

Result<LibObjectView> LibObjects::Get(uint64_t id, HandleKind kind) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = objects_.find(ResolveLocked(id));
  if (it == objects_.end() || !HandleKindServes(it->second.kind, kind))
    return Error(Err::kInvalidResourceHandle, "0x{:x} is not a live {} of this process", id, HandleKindName(kind));
  return it->second;
}

std::optional<LibObjectView> LibObjects::Find(uint64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = objects_.find(ResolveLocked(id));
  if (it == objects_.end()) return std::nullopt;
  return it->second;
}

void LibObjects::SetContent(uint64_t id, uint64_t content) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = objects_.find(ResolveLocked(id));
  if (it != objects_.end()) it->second.content = content;
}

void LibObjects::SetMode(uint64_t id, uint32_t mode) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = objects_.find(ResolveLocked(id));
  if (it != objects_.end()) it->second.mode = mode;
}

void LibObjects::SetAux(uint64_t id, size_t slot, int64_t value) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = objects_.find(ResolveLocked(id));
  if (it != objects_.end() && slot < it->second.aux.size()) it->second.aux[slot] = value;
}

void LibObjects::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  objects_.clear();
  aliases_.clear();
  memo_.clear();
}

void LibObjects::AfterFork() {
  new (&mu_) std::mutex();
  objects_.clear();
  aliases_.clear();
  memo_.clear();
}

std::optional<std::vector<std::byte>> LibObjects::Recall(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = memo_.find(key);
  if (it == memo_.end()) return std::nullopt;
  return it->second;
}

void LibObjects::Remember(std::string key, std::vector<std::byte> result) {
  std::lock_guard<std::mutex> lock(mu_);
  if (memo_.size() >= kMaxMemo) memo_.clear();
  memo_[std::move(key)] = std::move(result);
}

}  // namespace remora::shim
