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

}  // namespace remora::worker
