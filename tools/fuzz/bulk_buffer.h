// Bulk byte buffers for the fuzz targets' scripted transports: exact-size buffers whose memory
// is reused from input to input. A fresh allocation of up to 1 MiB per frame (which ASan maps
// and unmaps each time, and std::vector zero-fills) was about 40% of the `request` target's
// time. ASan's checks stay: the bytes past a buffer's size are poisoned while it is in use
// and the whole buffer while it waits for reuse, so reading past its end or after it was
// given back is still reported. The memory is mapped rather than allocated so that
// LeakSanitizer, which libFuzzer runs after many inputs, does not scan the pool's megabytes
// for pointers (bulk holds none).
//
// Contents start uninitialised. Thread-safe (the pool has a lock); a buffer itself is not.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdlib>
#include <mutex>
#include <utility>
#include <vector>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#include <sanitizer/asan_interface.h>
#define REMORA_FUZZ_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define REMORA_FUZZ_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#endif
#endif
#ifndef REMORA_FUZZ_POISON
#define REMORA_FUZZ_POISON(p, n) ((void)(p), (void)(n))
#define REMORA_FUZZ_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace remora::fuzz {

class BulkBuffer {
 public:
  BulkBuffer() = default;
  explicit BulkBuffer(size_t n) : size_(n) {
    if (n == 0) return;
    capacity_ = ClassSize(n);
    p_ = Pool::Get().Take(capacity_);
    REMORA_FUZZ_UNPOISON(p_, n);
  }
  BulkBuffer(BulkBuffer&& o) noexcept { Swap(o); }
  BulkBuffer& operator=(BulkBuffer&& o) noexcept {
    BulkBuffer(std::move(o)).Swap(*this);
    return *this;
  }
  BulkBuffer(const BulkBuffer&) = delete;
  BulkBuffer& operator=(const BulkBuffer&) = delete;
  ~BulkBuffer() {
    if (p_ != nullptr) Pool::Get().Give(p_, capacity_);
  }

  std::byte* data() { return p_; }
  const std::byte* data() const { return p_; }
  size_t size() const { return size_; }

 private:
  // Buffers come in powers of two from 4 KiB; at most kKeep of each size wait for reuse.
  static size_t ClassSize(size_t n) {
    size_t c = 4096;
    while (c < n) c <<= 1;
    return c;
  }

  class Pool {
   public:
    static Pool& Get() {
      static Pool* pool = new Pool();  // lives for the process (buffers may outlive statics)
      return *pool;
    }
    std::byte* Take(size_t capacity) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto& list = free_[Index(capacity)];
        if (!list.empty()) {
          std::byte* p = list.back();
          list.pop_back();
          return p;
        }
      }
      void* p = ::mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) std::abort();
      REMORA_FUZZ_POISON(p, capacity);
      return static_cast<std::byte*>(p);
    }
    void Give(std::byte* p, size_t capacity) {
      REMORA_FUZZ_POISON(p, capacity);
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto& list = free_[Index(capacity)];
        if (list.size() < kKeep) {
          list.push_back(p);
          return;
        }
      }
      REMORA_FUZZ_UNPOISON(p, capacity);
      ::munmap(p, capacity);
    }

   private:
    static constexpr size_t kKeep = 32;
    static size_t Index(size_t capacity) {
      size_t i = 0;
      while ((size_t{4096} << i) < capacity) i++;
      return i;
    }
    std::mutex mu_;
    std::vector<std::byte*> free_[24];
  };

  void Swap(BulkBuffer& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(size_, o.size_);
    std::swap(capacity_, o.capacity_);
  }

  std::byte* p_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

}  // namespace remora::fuzz
