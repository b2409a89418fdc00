// Fixed set of equally sized staging buffers, allocated lazily from a StagingAllocator.
// Private to the transports. Not thread-safe.
#pragma once

#include <cstddef>
#include <vector>

#include "remora/protocol/connection.h"

namespace remora {

class ChunkPool {
 public:
  ChunkPool(size_t count, size_t bytes) : bytes_(bytes), bufs_(count), busy_(count, false) {}
  ~ChunkPool() { FreeAll(); }
  ChunkPool(const ChunkPool&) = delete;
  ChunkPool& operator=(const ChunkPool&) = delete;

  void SetAllocator(StagingAllocator* a) { alloc_ = a; }
  size_t chunk_bytes() const { return bytes_; }

  // Index of a free buffer (allocating it on first use), or -1 if all are busy.
  Result<int> Acquire() {
    for (size_t i = 0; i < bufs_.size(); i++) {
      if (busy_[i]) continue;
      if (bufs_[i] == nullptr) {
        if (alloc_ == nullptr) return Error(Err::kInitializationError, "transport has no staging allocator");
        ASSIGN_OR_RETURN(bufs_[i], alloc_->Allocate(bytes_));
      }
      busy_[i] = true;
      return static_cast<int>(i);
    }
    return -1;
  }
  std::byte* data(int i) const { return bufs_[static_cast<size_t>(i)]; }
  void Release(int i) { busy_[static_cast<size_t>(i)] = false; }
  void FreeAll() {
    for (auto& b : bufs_) {
      if (b != nullptr && alloc_ != nullptr) alloc_->Free(b, bytes_);
      b = nullptr;
    }
  }

 private:
  StagingAllocator* alloc_ = nullptr;
  size_t bytes_;
  std::vector<std::byte*> bufs_;
  std::vector<bool> busy_;
};

}  // namespace remora
