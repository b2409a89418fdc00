// Staging buffers of the requester: registered memory that pageable application buffers are
// copied through (H2D segments, D2H reply targets). Buffers come in power-of-two size
// classes from `min_bytes` up, are reused across transfers (registering is expensive) and
// are capped in total; when a new buffer would pass the cap, idle buffers of other classes
// are dropped first, and if that is not enough Take answers nullopt (the caller waits for a
// Give or uses another path). `Buffer` is move-only with `size_t size() const`; the factory
// makes (allocates and registers) one. Not thread-safe.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "remora/base/status.h"

namespace remora::rdma {

template <typename Buffer>
class StagingPool {
 public:
  using Factory = std::function<Result<Buffer>(size_t bytes)>;

  StagingPool(size_t min_bytes, size_t cap_bytes, Factory make)
      : min_(min_bytes), cap_(cap_bytes), make_(std::move(make)) {}
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;

  static size_t ClassBytes(size_t n, size_t min_bytes) {
    size_t c = min_bytes;
    while (c < n) c *= 2;
    return c;
  }

  // A buffer of at least n bytes (n's class), or nullopt when none can be had within the cap.
  Result<std::optional<Buffer>> Take(size_t n) {
    size_t c = ClassBytes(n, min_);
    auto it = free_.find(c);
    if (it != free_.end() && !it->second.empty()) {
      Buffer b = std::move(it->second.back());
      it->second.pop_back();
      return std::optional<Buffer>(std::move(b));
    }
    if (c > cap_) return std::optional<Buffer>();
    // Make room by dropping idle buffers, largest first.
    while (allocated_ + c > cap_) {
      auto big = free_.end();
      for (auto f = free_.begin(); f != free_.end(); ++f)
        if (!f->second.empty()) big = f;
      if (big == free_.end()) return std::optional<Buffer>();
      allocated_ -= big->first;
      big->second.pop_back();
    }
    Result<Buffer> made = make_(c);
    if (!made.ok()) return made.take_status();
    allocated_ += c;
    created_++;
    return std::optional<Buffer>(std::move(made).value());
  }

  void Give(Buffer b) {
    size_t c = b.size();
    free_[c].push_back(std::move(b));
  }

  // Bytes of all buffers in existence, taken or idle.
  size_t allocated_bytes() const { return allocated_; }
  // Buffers made so far (a steady workload stops making new ones).
  size_t created() const { return created_; }

 private:
  size_t min_;
  size_t cap_;
  Factory make_;
  std::map<size_t, std::vector<Buffer>> free_;  // idle buffers by class
  size_t allocated_ = 0;
  size_t created_ = 0;
};

}  // namespace remora::rdma
