// Helpers shared by the unit tests: temporary directories, random data, a trivial staging
// allocator, bounded waits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "remora/base/fd.h"
#include "remora/protocol/connection.h"

namespace remora::test {

// A fresh directory under $TMPDIR (or /tmp), removed recursively on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Deterministic pseudo-random bytes (seeded), so failures reproduce.
std::vector<std::byte> RandomBytes(size_t n, uint64_t seed);

// Staging memory for the executor side of a transport: plain aligned_alloc. Counts live
// allocations so tests can check the transport gives everything back.
class AlignedStaging final : public StagingAllocator {
 public:
  Result<std::byte*> Allocate(size_t bytes) override;
  void Free(std::byte* p, size_t bytes) override;
  int live() const { return live_; }

 private:
  int live_ = 0;
};

// Polls `pred` until it is true or `timeout_ms` passes; returns its last value.
bool WaitFor(const std::function<bool()>& pred, int timeout_ms);

// A connected pair of Unix stream sockets (close-on-exec); both empty if none could be made.
std::pair<Fd, Fd> SocketPair();

}  // namespace remora::test
