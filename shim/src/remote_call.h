// RemoteCall: one call of a generated API entry (protocol/api/*.api) from the client's side.
// The generated client stubs (build/generated/api/<lib>_client.cc) validate and encode
// their arguments through it, then Invoke() sends the call the way its class says and
// decodes the results. Also the helpers the generated exported stubs use at the extern "C"
// boundary. Thread-safe: a RemoteCall lives on the calling thread's stack.
#pragma once

#include <cstdint>
#include <type_traits>

#include "function_ref.h"
#include "remora/base/status.h"
#include "remora/memmgr/handle_table.h"
#include "remora/protocol/api_args.h"

namespace remora::shim {

using api::CallClass;

// What the exported entry point tells its stub.
struct CallCtx {
  bool per_thread = false;  // a _ptsz/_ptds entry point: stream 0 means the thread's own
  const char* name = "";    // the function the application called, for messages
};

class RemoteCall {
 public:
  RemoteCall(const CallCtx& cc, uint16_t library, uint32_t function, CallClass cls, Domain domain);

  template <typename T>
  void Put(const T& v) {
    args_.Put(v);
  }
  void PutOptional(const void* p, size_t n) { args_.PutOptional(p, n); }
  void PutArray(const void* p, uint64_t count, size_t elem) { args_.PutArray(p, count, elem); }
  void PutString(const char* s) { args_.PutString(s); }

  // Arguments the client checks against its own tables before anything is sent (the worker
  // checks them again, authoritatively). The first of them that names a device decides
  // which device the call runs on; without one, the calling thread's current device.
  Status Stream(const void* stream);
  Status Handle(HandleKind kind, const void* handle, bool nullable);
  Status Device(int ordinal);
  Status DevPtr(uint64_t ptr, uint64_t bytes);
  // A bad argument, in the library's own vocabulary.
  Status Fail(uint32_t code, const char* what) const;

  // Sends the call and, for sync and wait calls, waits for the reply and hands its results to
  // `results`. A wait call also reports the first failure of earlier asynchronous work.
  Status Invoke(FunctionRef<Status(api::ArgReader&)> results = {});

 private:
  CallCtx cc_;
  uint16_t library_;
  uint32_t function_;
  CallClass cls_;
  Domain domain_;
  int device_ = -1;
  api::ArgWriter& args_;
};

// Converts between the pointer, handle and enum types of two APIs (a runtime entry
// forwarded to its driver equivalent): same bits, the other library's spelling.
template <typename To, typename From>
To ViaCast(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_pointer_v<To> && std::is_pointer_v<From>) {
    return reinterpret_cast<To>(v);
  } else if constexpr (std::is_pointer_v<From> && std::is_integral_v<To>) {
    static_assert(sizeof(To) == sizeof(From), "a via argument changes size");
    return static_cast<To>(reinterpret_cast<uintptr_t>(v));  // a device pointer as CUdeviceptr
  } else {
    static_assert(!std::is_pointer_v<To> && !std::is_pointer_v<From>, "a via argument changes from pointer to value");
    static_assert(sizeof(To) == sizeof(From), "a via argument changes size");
    return static_cast<To>(v);
  }
}

// The extern "C" boundary of a generated entry point: `st` as a status of `caller`'s
// domain (recorded as the thread's last error for the runtime API).
uint32_t FinishApi(Domain caller, const Status& st, const char* call);
// An entry the description marks unsupported: logs its name once, returns `code`.
uint32_t NotSupported(Domain caller, uint32_t code, const char* call);

}  // namespace remora::shim
