#include "worker/session/held_results.h"

#include <cstring>


namespace remora::worker {

Result<uint64_t> HeldResults::Hold(std::vector<std::byte> bytes) {
  if (bytes.size() > kMaxBytes - bytes_)
    return Error(Err::kMemoryAllocation, "a call's results of {} bytes: the session already holds {} bytes of results not read back",
                 bytes.size(), bytes_);
  const uint64_t id = next_++;
  bytes_ += bytes.size();
  held_.emplace(id, std::move(bytes));
  return id;
}

Status HeldResults::Read(uint64_t id, uint64_t offset, void* dst, uint64_t size) {
  auto it = held_.find(id);
  if (it == held_.end()) return Error(Err::kInvalidValue, "no held result {}", id);
  const std::vector<std::byte>& b = it->second;
  if (offset > b.size() || size > b.size() - offset)
    return Error(Err::kInvalidValue, "bytes {}+{} are outside held result {} of {} bytes", offset, size, id, b.size());
  if (size != 0) std::memcpy(dst, b.data() + offset, size);
  if (offset + size == b.size()) {
    bytes_ -= b.size();
    held_.erase(it);
  }
  return Status::Ok();
}

Status StagedArgs::Write(uint64_t id, uint64_t total, uint64_t offset, const void* bytes, uint64_t size) {
  auto it = staged_.find(id);
  if (offset == 0) {
    if (it != staged_.end()) {  // begun again: the earlier attempt is dropped
      bytes_ -= it->second.total;
      staged_.erase(it);
    }
    if (total > kMaxBytes - bytes_)
      return Error(Err::kMemoryAllocation, "arguments of {} bytes: the session already stages {} bytes of arguments", total,
                   bytes_);
    Entry e;
    e.total = total;
    e.bytes.reserve(total);
    it = staged_.emplace(id, std::move(e)).first;
    bytes_ += total;
  } else if (it == staged_.end()) {
    return Error(Err::kInvalidValue, "a piece at {} of staged arguments {} that were never begun", offset, id);
  }
  Entry& e = it->second;
  if (offset != e.bytes.size() || size > e.total - e.bytes.size())
    return Error(Err::kInvalidValue, "a piece {}+{} of staged arguments {} of {} bytes, {} sent so far", offset, size, id,
                 e.total, e.bytes.size());
  const auto* b = static_cast<const std::byte*>(bytes);
  e.bytes.insert(e.bytes.end(), b, b + size);
  return Status::Ok();
}

Result<std::vector<std::byte>> StagedArgs::Take(uint64_t id) {
  auto it = staged_.find(id);
  if (it == staged_.end()) return Error(Err::kInvalidValue, "malformed request: no staged arguments {}", id);
  Entry e = std::move(it->second);  // dropped either way
  bytes_ -= e.total;
  staged_.erase(it);
  if (e.bytes.size() != e.total)
    return Error(Err::kInvalidValue, "malformed request: staged arguments {} hold {} of their {} bytes", id, e.bytes.size(),
                 e.total);
  return std::move(e.bytes);
}

}  // namespace remora::worker
