// EmulatedDevice: what the host backend's emulated math libraries (host_lib_*.cc) need of
// the emulated GPU: its device memory as host memory, and its streams' order. Device
// addresses are the fake ones the host driver hands out; a range is translated when a call
// is made (so a bad one fails the call) and read or written when the stream gets there.
// Implemented by the host Driver (host_driver.h); used by the executor's single thread.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "remora/base/status.h"
#include "worker/backend/driver.h"

namespace remora::worker {

class EmulatedDevice {
 public:
  virtual ~EmulatedDevice() = default;
  // Host address of [p, p+n) of emulated device memory (one allocation), or kInvalidValue.
  virtual Result<std::byte*> Translate(DevPtr p, uint64_t n) = 0;
  // Runs `task` in stream `s`'s order: at once when nothing is outstanding there, else on the
  // stream's thread after the work before it.
  virtual Status InOrder(DStream s, std::function<void()> task) = 0;
  // The same for a task that may block (NCCL's emulated collectives wait for other ranks):
  // never run inline on the caller's thread.
  virtual Status InOrderBlocking(DStream s, std::function<void()> task) = 0;
  // The emulated GPU the calling (executor) thread uses now.
  virtual int CurrentDevice() const = 0;
  // Waits until everything submitted to `s` ran (a library call that returns a host value).
  virtual Status Synchronize(DStream s) = 0;
  // Device memory for a library's own use (the caller charges it).
  virtual Result<DevPtr> Alloc(size_t bytes) = 0;
  virtual Status Free(DevPtr p) = 0;
  // The emulated cuBLAS's live handles: a cublasHandle_t serves as a cublasLtHandle_t (the
  // real cuBLAS holds a cuBLASLt context in it and documents the cast), so the emulated
  // cuBLASLt accepts them. Thread-safe.
  virtual void NoteBlasHandle(const void* handle, bool live) = 0;
  virtual bool IsBlasHandle(const void* handle) = 0;
};

// The host backend's emulation of a math library (its gen::<lib>::Api, as a shared_ptr<void>
// to that Api), or nullptr for a library it does not emulate (host_libraries.cc).
std::shared_ptr<void> MakeHostLibrary(Domain library, EmulatedDevice& device);

}  // namespace remora::worker
