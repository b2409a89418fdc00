// StallWatch: says in the worker's log when the executor has been inside one unit of work (a
// request, a generated API call, the pending operations' poll) for longer than a threshold,
// naming it, and again when it returns. The executor serves its session's requests one at a
// time, so a driver call that blocks (one that waits for the GPU while a stream waits on one of
// the client's host functions, whose callbackDone only this executor can take) stops the whole
// session; this is how an operator, and a developer without a debugger on the GPU host, finds
// which call did. Costs a clock read, two atomic increments and a few relaxed stores per unit
// of work (a request, or a pass over a non-empty list of pending operations).
//
// With the warning goes the executor thread's stack (taken by a signal, SIGURG, that the
// watch sends it; frames as module+offset, which addr2line resolves against the same build):
// which driver call, from which operation, without a debugger on the GPU host.
//
// Threshold: REMORA_WORKER_STALL_WARN_S in the worker's environment (the supervisor passes it
// on; default 10 s; 0 turns the watch off, with no thread).
// Thread-safety: Enter/Name/Leave on the executor thread only; the watch's own thread reads.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <pthread.h>
#include <string>
#include <thread>

namespace remora::worker {

class StallWatch {
 public:
  // Starts the watching thread unless `warn_after_ns` is 0.
  StallWatch(uint64_t session, uint64_t warn_after_ns);
  ~StallWatch();  // stops and joins the thread
  StallWatch(const StallWatch&) = delete;
  StallWatch& operator=(const StallWatch&) = delete;

  // The threshold from the environment (REMORA_WORKER_STALL_WARN_S), in nanoseconds.
  static uint64_t WarnAfterFromEnv();

  // The executor begins a unit of work: request kind `kind` (a wire::Request discriminant), or
  // -1 with a name given next.
  void Enter(int kind);
  // Names the unit of work begun: a generated call's name, or a pending operation's type
  // (typeid(...).name()); `name` lives for the process.
  void Name(const char* name) { name_.store(name, std::memory_order_relaxed); }
  // The unit of work ended; logs how long it took if it was reported as stalled.
  void Leave();

  // Scoped Enter/Leave.
  class Scope {
   public:
    Scope(StallWatch& w, int kind) : w_(w) { w_.Enter(kind); }
    ~Scope() { w_.Leave(); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    StallWatch& w_;
  };

  // What a unit of work is called in the log: its name (a pending operation's type name is
  // demangled), else its request kind's.
  static std::string Describe(int kind, const char* name);

 private:
  void Watch();
  // The executor thread's stack, one frame per line (empty if it could not be taken).
  std::string ExecutorStack();

  const uint64_t session_, warn_after_ns_;
  // Written by the executor; `seq_` is odd while inside a unit of work.
  std::atomic<uint64_t> seq_{0}, since_ns_{0};
  std::atomic<int> kind_{-1};
  std::atomic<const char*> name_{nullptr};
  std::atomic<uint64_t> reported_seq_{0};  // the unit of work reported as stalled (0: none)
  std::atomic<bool> has_thread_{false};
  pthread_t executor_thread_{};  // set once, by the first Enter, before has_thread_
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // under mu_
  std::thread thread_;
};

}  // namespace remora::worker
