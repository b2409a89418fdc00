// Host callbacks (cudaLaunchHostFunc, cudaStreamAddCallback) run in the application's
// process when the server reports that the stream reached them. One callback thread,
// started on first use, runs them in order and tells the server when each is done (the
// stream waits until then, as in CUDA); it also receives frames when no application thread
// is, so a callback runs even while the application only waits on host memory.
// Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "process.h"

namespace remora::shim {

class HostCallbacks {
 public:
  static HostCallbacks& Get() { return Process::Get().callbacks(); }
  // Registers a callback; returns its id for the hostFunc request.
  uint64_t Add(std::function<void()> fn);
  // The request could not be sent: forget the callback.
  void Cancel(uint64_t id);
  // The server says the stream reached `id` (called on the receiving thread).
  void Reached(uint64_t id);
  // Blocks until every callback registered so far has run (or its session is gone). For a
  // copy that must read host memory in stream order but cannot share it with the worker.
  // Returns at once on the callback thread itself.
  void WaitForRegistered();
  // In a forked child: no thread, no pending callbacks.
  void AfterFork();

 private:
  void Loop();

  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t next_id_ = 1;
  std::map<uint64_t, std::function<void()>> waiting_;
  std::deque<uint64_t> ready_;
  uint64_t running_ = 0;  // id of the callback being run, 0 if none
  std::thread::id thread_id_;
  bool thread_started_ = false;
};

}  // namespace remora::shim
