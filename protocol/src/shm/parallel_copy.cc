#include "shm/parallel_copy.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <new>
#include <thread>

namespace remora::shm {
namespace {

constexpr size_t kMinParallel = 1 << 20;  // below this one memcpy is faster
constexpr size_t kMinPiece = 256 << 10;

struct Piece {
  char* dst;
  const char* src;
  size_t n;
  std::atomic<int>* left;
};

class CopyPool {
 public:
  static CopyPool& Get() {
    static CopyPool* p = new CopyPool();  // never destroyed: copies may run during exit
    return *p;
  }

  void Copy(char* dst, const char* src, size_t n) {
    int helpers = Helpers();
    size_t pieces = std::min<size_t>(static_cast<size_t>(helpers) + 1, n / kMinPiece);
    if (n < kMinParallel || pieces < 2) {
      std::memcpy(dst, src, n);
      return;
    }
    size_t per = (n / pieces + 63) / 64 * 64;
    std::atomic<int> left{0};
    size_t off = per;  // the caller copies the first piece itself
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (; off < n; off += per) {
        size_t len = std::min(per, n - off);
        left.fetch_add(1, std::memory_order_relaxed);
        queue_.push_back(Piece{dst + off, src + off, len, &left});
      }
    }
    cv_.notify_all();
    std::memcpy(dst, src, std::min(per, n));
    // Help with what is still queued, then wait for the pieces in flight.
    for (;;) {
      Piece p{};
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (queue_.empty()) break;
        p = queue_.front();
        queue_.pop_front();
      }
      std::memcpy(p.dst, p.src, p.n);
      p.left->fetch_sub(1, std::memory_order_release);
    }
    while (left.load(std::memory_order_acquire) != 0) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
    }
  }

 private:
  CopyPool() {
    pthread_atfork(nullptr, nullptr, [] { Get().AfterFork(); });
  }

  int Helpers() {
    std::lock_guard<std::mutex> lock(mu_);
    if (started_ < 0) {
      unsigned hw = std::thread::hardware_concurrency();
      started_ = static_cast<int>(std::clamp(hw / 4, 1u, 3u));
      for (int i = 0; i < started_; i++) std::thread([this] { Loop(); }).detach();
    }
    return started_;
  }

  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return !queue_.empty(); });
      Piece p = queue_.front();
      queue_.pop_front();
      lock.unlock();
      std::memcpy(p.dst, p.src, p.n);
      p.left->fetch_sub(1, std::memory_order_release);
      lock.lock();
    }
  }

  void AfterFork() {
    new (&mu_) std::mutex();
    new (&cv_) std::condition_variable();
    queue_.clear();
    started_ = -1;  // the helper threads did not survive the fork
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Piece> queue_;
  int started_ = -1;
};

}  // namespace

void ParallelCopy(void* dst, const void* src, size_t n) {
  CopyPool::Get().Copy(static_cast<char*>(dst), static_cast<const char*>(src), n);
}

}  // namespace remora::shm
