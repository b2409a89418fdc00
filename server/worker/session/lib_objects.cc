#include "worker/session/lib_objects.h"

namespace remora::worker {

Status LibObjects::CheckNew(uint64_t id, HandleKind kind) const {
  uint8_t k = static_cast<uint8_t>(id >> 56);
  uint64_t n = (id >> 4) & ((uint64_t{1} << 52) - 1);
  if (k != static_cast<uint8_t>(kind) || (id & 0xf) != 0 || n == 0 || n > 0x7fffffffull)
    return Error(Err::kInvalidValue, "malformed request: 0x{:x} is not an id for a new {}", id, HandleKindName(kind));
  if (by_id_.count(id)) return Error(Err::kInvalidValue, "malformed request: the {} 0x{:x} exists already", HandleKindName(kind), id);
  return Status::Ok();
}

LibObject* LibObjects::Add(uint64_t id, HandleKind kind, Domain library, uint64_t bits, int gpu) {
  auto o = std::make_unique<LibObject>();
  o->id = id;
  o->kind = kind;
  o->library = library;
  o->bits = bits;
  o->gpu = gpu;
  LibObject* raw = o.get();
  uint64_t seq = next_seq_++;
  objects_.emplace(seq, std::move(o));
  by_id_[id] = seq;
  return raw;
}

Result<LibObject*> LibObjects::Get(uint64_t id, HandleKind kind) {
  LibObject* o = Find(id);
  if (o == nullptr || !HandleKindServes(o->kind, kind)) return Error(Err::kInvalidValue, "0x{:x} is not a {} of this session", id, HandleKindName(kind));
  return o;
}

LibObject* LibObjects::Find(uint64_t id) {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : objects_.at(it->second).get();
}

std::unique_ptr<LibObject> LibObjects::Take(uint64_t id) {
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return nullptr;
  auto o = objects_.find(it->second);
  std::unique_ptr<LibObject> out = std::move(o->second);
  objects_.erase(o);
  by_id_.erase(it);
  return out;
}

std::vector<std::unique_ptr<LibObject>> LibObjects::TakeAll() {
  std::vector<std::unique_ptr<LibObject>> out;
  for (auto it = objects_.rbegin(); it != objects_.rend(); ++it) out.push_back(std::move(it->second));
  objects_.clear();
  by_id_.clear();
  return out;
}

}  // namespace remora::worker
