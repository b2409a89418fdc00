// Streams of the host-emulated backend: work runs in issue order per stream, after the work
// of other streams it depends on (the legacy stream's implicit synchronisation,
// cudaStreamWaitEvent), like on a GPU. Private to the host backend (host_driver.h).
//
// Threads: a fixed pool per driver (EmuScheduler), never one per stream, so a client that
// creates thousands of streams gets no more threads (docs/SECURITY.md, F5). A stream whose
// next task waits for another stream holds no thread; a task that blocks (a host function
// waiting for its client) holds one until it returns.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace remora::worker {

struct EmuStream;

// Work on another stream that must complete first: its tasks up to `target`.
struct EmuDep {
  std::shared_ptr<EmuStream> stream;
  uint64_t target;
};

class EmuScheduler {
 public:
  explicit EmuScheduler(int threads);
  // Stops the threads: tasks running finish, queued ones never run.
  ~EmuScheduler();
  EmuScheduler(const EmuScheduler&) = delete;
  EmuScheduler& operator=(const EmuScheduler&) = delete;

  void MakeRunnable(std::shared_ptr<EmuStream> s);
  // A task completed somewhere: streams waiting for a dependency look again.
  void Completed();

 private:
  void Run();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<EmuStream>> runnable_;
  std::vector<std::shared_ptr<EmuStream>> waiting_;
  uint64_t generation_ = 0;  // completions so far
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

// Thread-safety: Submit from the executor's thread; the scheduler's threads run the tasks.
struct EmuStream {
  EmuStream(bool blocking_, EmuScheduler* scheduler) : blocking(blocking_), scheduler_(scheduler) {}
  const bool blocking;  // synchronises with the legacy stream (not cudaStreamNonBlocking)
  std::atomic<uint64_t> completed{0};  // tasks that finished

  // Runs `task` after everything queued here and after `deps`: at once if that is all done
  // and `inline_ok`, else on a scheduler thread.
  void Submit(const std::shared_ptr<EmuStream>& self, std::vector<EmuDep> deps, std::function<void()> task,
              bool inline_ok = true);
  uint64_t Issued();
  bool Idle() { return completed.load() >= Issued(); }

 private:
  friend class EmuScheduler;
  struct Task {
    std::vector<EmuDep> deps;
    std::function<void()> fn;
  };
  EmuScheduler* scheduler_;
  std::mutex mu_;
  std::deque<Task> queue_;
  uint64_t issued_ = 0;     // under mu_
  bool scheduled_ = false;  // runnable, waiting or running in the scheduler (under mu_)
};

}  // namespace remora::worker
