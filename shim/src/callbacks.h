// Host callbacks run in the application's process when the server reports that the work
// before them is done: cudaLaunchHostFunc / cudaStreamAddCallback (once), the host nodes of
// graphs (at every launch), user-object destructors (once, when the driver drops the last
// reference). One callback thread, started on first use, runs them in order and tells the
// server when each stream callback is done (the stream waits until then, as in CUDA); it
// also receives frames when no application thread is, so a callback runs even while the
// application only waits on host memory. Thread-safe.
#pragma once

#include <cuda_runtime_api.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "client.h"
#include "process.h"

namespace remora::shim {

class HostCallbacks {
 public:
  static HostCallbacks& Get() { return Process::Get().callbacks(); }
  // Registers a stream callback (run once); returns its id for the hostFunc request. A
  // capture may turn it into a repeating one (callbackCaptured). `link`: the server whose
  // stream it is queued on (several servers: forgotten if that server is lost).
  uint64_t Add(std::function<void()> fn, void (*raw)(void*) = nullptr, void* raw_data = nullptr,
               Client* link = nullptr);
  // Registers a graph host node's function: run at each launch that reaches it.
  uint64_t AddRepeat(void (*fn)(void*), void* data);
  // Registers a function run once without answering the server (a user object's destructor).
  uint64_t AddDetached(std::function<void()> fn);
  // The request could not be sent: forget the callback.
  void Cancel(uint64_t id);
  // A notice from the server `from` (called on the receiving thread); the answer goes back
  // to that server.
  void Notify(Client::CallbackEvent event, uint64_t id, Client* from);
  // A graph host node of executable graph `exec` was reached (Notice.graphHostNode, its
  // bytes already written): run function `id`, then answer graphHostNodeDone with the
  // application's bytes that the graph's host-to-device copies read.
  void NotifyGraphNode(uint64_t id, uint64_t exec, Client* from);
  // The application's function and data behind a repeating callback (graph host nodes), or
  // {nullptr, nullptr}.
  std::pair<void (*)(void*), void*> Raw(uint64_t id);
  // Blocks until every stream callback registered so far has run (or its session is gone).
  // For a copy that must read host memory in stream order but cannot share it with the
  // worker. Returns at once on the callback thread itself.
  void WaitForRegistered();
  // In a forked child: no thread, no pending callbacks.
  void AfterFork();
  // Whether the calling thread is the one running host callbacks (a stream may be waiting
  // for it: it must not wait for the device).
  static bool OnCallbackThread();

 private:
  struct Entry {
    std::function<void()> fn;
    void (*raw)(void*) = nullptr;
    void* raw_data = nullptr;
    Client* link = nullptr;  // the server that will reach it (nullptr: any)
  };
  // Forgets the stream callbacks of servers that were lost (their notices never come), so
  // nothing waits for them; true if every server was lost. Caller holds mu_.
  bool ForgetLostLocked();
  void StartLocked();
  void Loop();

  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t next_id_ = 1;
  std::map<uint64_t, Entry> waiting_;   // stream callbacks not yet run
  std::map<uint64_t, Entry> repeat_;    // graph host functions
  std::map<uint64_t, Entry> detached_;  // run once, unanswered
  struct Ready {
    Client::CallbackEvent event;
    uint64_t id;
    Client* from;
    uint64_t exec = 0;  // a graph host node's executable graph (NotifyGraphNode), else 0
  };
  // Answers a graph host node (NotifyGraphNode) once its function ran.
  static void AnswerGraphNode(Client* from, uint64_t id, uint64_t exec);
  std::deque<Ready> ready_;
  uint64_t running_ = 0;  // id of the stream callback being run, 0 if none
  std::thread::id thread_id_;
  bool thread_started_ = false;
};

// Runs `fn` in this process when `stream` gets there, as cudaLaunchHostFunc does (work the GPU
// would do on memory only this process has: a memset of pinned memory the worker cannot map).
// `per_thread`: a 0 stream is the per-thread default stream. Returns cudaSuccess or the error
// the runtime would (an invalid stream, a lost device).
cudaError_t EnqueueHostWork(cudaStream_t stream, std::function<void()> fn, bool per_thread, const char* call);

}  // namespace remora::shim
