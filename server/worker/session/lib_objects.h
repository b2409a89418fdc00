// LibObjects: the objects math libraries created for one session (cuBLAS handles, cuDNN
// descriptors, cuFFT plans, cuRAND generators, ...), under the ids the client minted for them
// (shim/src/lib_objects.h: (kind << 56) | (n << 4)). Every use of an object by a later call
// is looked up here by id and kind, so a forged or foreign id, or an object of the wrong kind,
// never reaches a library. Beside the library's handle each object keeps what the worker
// mirrors of it (its stream, the pointer mode of its scalars), what the session was charged
// for it (a workspace the worker gave it, memory the library allocated internally), and
// library-specific state (LibExtra: cuDNN's backend graph, cuBLASLt pointer attributes).
//
// Owned by SessionState; the session's end destroys the objects newest first (a descriptor
// before the handle it was made with), then frees their workspaces and returns the charges.
// Used by the executor's single thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <type_traits>
#include <vector>

#include "remora/base/status.h"
#include "remora/memmgr/handle_table.h"
#include "worker/backend/driver.h"

namespace remora::worker {

// Library-specific state of an object (see lib_*.h).
struct LibExtra {
  virtual ~LibExtra() = default;
};

struct LibObject {
  uint64_t id = 0;
  HandleKind kind{};
  Domain library{};
  uint64_t bits = 0;        // the library's handle: a pointer, or an int (cufftHandle); 0 = none yet
  int gpu = 0;
  uint32_t mode = 0;        // pointer-mode bits: bit i set = scalar slot i is a device pointer
  DStream stream = nullptr; // the stream the library runs the object's work on
  DevPtr workspace = 0;     // device memory the worker gave the object (charged), or 0
  uint64_t workspace_bytes = 0;
  uint64_t charged = 0;     // bytes charged for what the library allocated for it (measured)
  std::unique_ptr<LibExtra> extra;
  // Device ranges earlier calls left with the object (a descriptor's arrays, the buffer of a
  // multi-phase call), by the name of the parameter that gave each (`slot`, a string literal
  // of the generated code): every later call that hands the object to its library checks
  // them again (OpContext::RecheckObject; protocol/api roles `keep=`).
  struct KeptRange {
    const char* slot;
    uint64_t addr, bytes;
  };
  std::vector<KeptRange> kept;
  // The worker's own host workspace for the object's calls (role `hostwork`): the
  // application's host address never reaches the library.
  std::vector<std::byte> host_work;

  template <typename T>
  static T FromBits(uint64_t bits) {
    if constexpr (std::is_pointer_v<T>) {
      return reinterpret_cast<T>(static_cast<uintptr_t>(bits));
    } else {
      static_assert(std::is_integral_v<T> || std::is_enum_v<T>, "a library handle is a pointer or an integer");
      return static_cast<T>(bits);
    }
  }
  template <typename T>
  static uint64_t ToBits(T v) {
    if constexpr (std::is_pointer_v<T>) {
      return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(v));
    } else {
      return static_cast<uint64_t>(static_cast<int64_t>(v));
    }
  }
  template <typename T>
  T As() const {
    return FromBits<T>(bits);
  }
  // The extra state as X (created on first use).
  template <typename X>
  X& Extra() {
    if (auto* x = dynamic_cast<X*>(extra.get())) return *x;
    extra = std::make_unique<X>();
    return static_cast<X&>(*extra);
  }
};

class LibObjects {
 public:
  // OK if `id` is a well-formed id of `kind` that names no object yet.
  Status CheckNew(uint64_t id, HandleKind kind) const;
  // Registers an object (the id checked with CheckNew).
  LibObject* Add(uint64_t id, HandleKind kind, Domain library, uint64_t bits, int gpu);
  // A live object of `kind`, or kInvalidValue naming what was wrong.
  Result<LibObject*> Get(uint64_t id, HandleKind kind);
  LibObject* Find(uint64_t id);
  // Removes an object and hands it to the caller (who releases what it holds).
  std::unique_ptr<LibObject> Take(uint64_t id);
  // Removes every object, newest first.
  std::vector<std::unique_ptr<LibObject>> TakeAll();
  size_t size() const { return objects_.size(); }
  template <typename Fn>
  void ForEach(Fn&& fn) {
    for (auto& [seq, o] : objects_) fn(*o);
  }

 private:
  uint64_t next_seq_ = 1;
  std::map<uint64_t, std::unique_ptr<LibObject>> objects_;  // by creation order
  std::map<uint64_t, uint64_t> by_id_;                      // id -> creation order
};

}  // namespace remora::worker
