// Staging memory for executor-side transports under fuzzing: plain aligned memory that
// counts what is live, so a target can check that a connection gives everything back.
#pragma once

#include <cstdlib>

#include "remora/protocol/connection.h"

namespace remora::fuzz {

class CountingStaging final : public StagingAllocator {
 public:
  Result<std::byte*> Allocate(size_t bytes) override {
    void* p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    if (p == nullptr) return Status(Err::kMemoryAllocation, "staging");
    live_++;
    return static_cast<std::byte*>(p);
  }
  void Free(std::byte* p, size_t) override {
    std::free(p);
    live_--;
  }
  int live() const { return live_; }

 private:
  int live_ = 0;
};

}  // namespace remora::fuzz
