// ThreadSlot<T, Tag>(): a per-thread T that stays usable while the process exits.
//
// CUDA calls arrive from other libraries' static destructors and atexit handlers (PyTorch's
// cuSOLVER handle pool destroys its handles there). glibc's exit() destroys the exiting
// thread's thread_local objects *before* it runs those handlers, so a plain
// `thread_local std::vector<...>` used by such a call is a use-after-free: its buffer was
// freed, and writing into it corrupted the heap (PyTorch's linalg path aborted at exit with
// "malloc_consolidate(): unaligned fastbin chunk detected").
//
// Contract: the T lives on the heap behind a trivially destructible thread_local pointer
// (valid until the thread is gone). A thread_local reaper frees it when the thread ends; a use
// after that (during exit) gets a fresh T, which is then never freed - one object per thread
// that calls CUDA after its own teardown. Tag tells apart slots of the same T. Not shared
// between threads; no locking.
#pragma once

namespace remora::shim {

template <typename T, typename Tag = T>
T& ThreadSlot() {
  thread_local T* slot = nullptr;
  thread_local bool reaped = false;
  struct Reaper {
    ~Reaper() {
      delete slot;
      slot = nullptr;
      reaped = true;
    }
  };
  if (slot == nullptr) {
    slot = new T();
    if (!reaped) {
      thread_local Reaper reaper;  // registers its destructor on first use only
      (void)reaper;
    }
  }
  return *slot;
}

}  // namespace remora::shim
