// Contexts as the driver API shows them. Every context of a device runs on the worker's
// primary context of that GPU; what the application sees is a Context object of this
// process: the primary context of each device (retained and released by count, flags kept)
// and the contexts it created (cuCtxCreate), which own the memory, streams, events and
// modules made while they were current and release them when destroyed.
//
// The current context is per thread, as a stack (push/pop/set). The runtime and the driver
// share it: cudaSetDevice makes the device's primary context current, and making a context
// current makes its device the runtime's current device. A thread that used the runtime but
// never set a context has its device's primary context current, as with CUDA's runtime.
//
// Thread-safety: Contexts is thread-safe; a Context's fields other than `alive` and the owned
// lists never change after creation.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "remora/base/status.h"

namespace remora::shim::driver {

// What a created context owns (destroyed with it).
struct Owned {
  std::vector<uint64_t> allocations, streams, events, modules;
};

struct Context {
  static constexpr uint64_t kMagic = 0x5843'4152'4f4d'4552ull;  // "REMORACX"
  uint64_t magic = kMagic;
  int device = 0;
  bool primary = false;
  unsigned long long id = 0;
  std::atomic<unsigned> flags{0};
  std::atomic<bool> alive{true};
  Owned owned;  // guarded by Contexts' lock
};

class Contexts {
 public:
  // The primary context of `device` (a stable object for the life of the process).
  Context* Primary(int device);
  // A live context of this process, or CUDA_ERROR_INVALID_CONTEXT.
  Result<Context*> Check(CUcontext c);
  Context* Create(int device, unsigned flags);
  // Ends a created context: kNotPermitted for a primary one. The caller releases what it
  // owned (Take*) before.
  Status Destroy(Context* c);

  // Primary contexts: retain count, flags, and whether the runtime uses the device.
  int Retain(int device);  // returns the new count
  Result<int> Release(int device);
  void MarkRuntimeActive(int device);
  bool Active(int device);
  unsigned PrimaryFlags(int device);
  void SetPrimaryFlags(int device, unsigned flags);

  // What the current created context (if any) owns from now on.
  void Own(uint64_t handle, std::vector<uint64_t> Owned::*list);
  // Stops `handle` being owned (it was destroyed on its own).
  void Disown(uint64_t handle, std::vector<uint64_t> Owned::*list);
  // The live created context owning `handle`, or nullptr (then its device's primary one).
  Context* OwnerOf(uint64_t handle, std::vector<uint64_t> Owned::*list);
  // Moves out everything `c` owns (for its destruction).
  Owned TakeOwned(Context* c);

 private:
  struct PrimaryState {
    std::unique_ptr<Context> ctx;
    int refs = 0;
    unsigned flags = 0;
    bool runtime_active = false;
  };
  PrimaryState& State(int device);  // caller holds mu_

  std::mutex mu_;
  std::map<int, PrimaryState> primary_;
  std::set<Context*> created_;
  std::atomic<unsigned long long> next_id_{1};
  std::atomic<uint64_t> runtime_mask_{0};  // devices (< 64) the runtime has used
};

// ---- the calling thread's current context --------------------------------------------
// The current context: the top of the thread's stack, else the primary context of the
// runtime's current device if the thread used the runtime, else nullptr.
Context* Current();
// Replaces the top of the stack (cuCtxSetCurrent; nullptr empties the stack's top).
void SetCurrent(Context* c);
void Push(Context* c);
Context* Pop();  // nullptr if the stack is empty
// The device of the current context, or CUDA_ERROR_INVALID_CONTEXT without one.
Result<int> CurrentDevice();

}  // namespace remora::shim::driver
