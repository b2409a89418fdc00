#include "test_util.h"

#include <sys/socket.h>

#include <chrono>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <thread>

#include "remora/base/util.h"

namespace remora::test {

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/remora-unit-XXXXXX";
  char* p = ::mkdtemp(tmpl.data());
  if (p == nullptr) std::abort();
  path_ = p;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::vector<std::byte> RandomBytes(size_t n, uint64_t seed) {
  std::vector<std::byte> v(n);
  std::mt19937_64 rng(seed);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t x = rng();
    std::memcpy(v.data() + i, &x, 8);
  }
  uint64_t x = rng();
  for (; i < n; i++, x >>= 8) v[i] = static_cast<std::byte>(x & 0xff);
  return v;
}

Result<std::byte*> AlignedStaging::Allocate(size_t bytes) {
  void* p = std::aligned_alloc(4096, AlignUp(bytes == 0 ? 1 : bytes, 4096));
  if (p == nullptr) return Error(Err::kMemoryAllocation, "aligned_alloc({}) failed", bytes);
  live_++;
  return static_cast<std::byte*>(p);
}

void AlignedStaging::Free(std::byte* p, size_t) {
  live_--;
  std::free(p);
}

bool WaitFor(const std::function<bool()>& pred, int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline) return pred();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

std::pair<Fd, Fd> SocketPair() {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return {};
  return {Fd(sv[0]), Fd(sv[1])};
}

}  // namespace remora::test
