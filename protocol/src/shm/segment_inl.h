#pragma once

#include "remora/base/util.h"

namespace remora::shm {

template <typename Pred>
bool WaitOn(Doorbell* bell, int64_t spin_ns, int64_t timeout_us, Pred ready) {
  if (ready()) return true;  // the common case: no clock read, no doorbell traffic
  uint64_t start = MonotonicNanos();
  uint64_t spin_end = start + static_cast<uint64_t>(spin_ns);
  while (MonotonicNanos() < spin_end) {
    if (ready()) return true;
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
  uint64_t deadline = start + static_cast<uint64_t>(timeout_us) * 1000;
  for (;;) {
    bell->waiting.store(1, std::memory_order_seq_cst);
    uint32_t seq = bell->seq.load(std::memory_order_seq_cst);
    if (ready()) {
      bell->waiting.store(0, std::memory_order_relaxed);
      return true;
    }
    uint64_t now = MonotonicNanos();
    if (now >= deadline) {
      bell->waiting.store(0, std::memory_order_relaxed);
      return false;
    }
    FutexWait(&bell->seq, seq, static_cast<int64_t>((deadline - now) / 1000) + 1);
    bell->waiting.store(0, std::memory_order_relaxed);
    if (ready()) return true;
  }
}

}  // namespace remora::shm
