// RemoteCall: one call of a generated API entry (protocol/api/*.api) from the client's side.
// The generated client stubs (build/generated/api/<lib>_client.cc) validate and encode
// their arguments through it, then Invoke() sends the call the way its class says and
// decodes the results. Also the helpers the generated exported stubs use at the extern "C"
// boundary. Thread-safe: a RemoteCall lives on the calling thread's stack.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "function_ref.h"
#include "remora/base/status.h"
#include "remora/memmgr/handle_table.h"
#include "remora/protocol/api_args.h"
#include "stream_key.h"

namespace remora::shim {

using api::CallClass;

// Ordered calls of one library that the calling thread gathers instead of sending (NCCL's
// groups: shim/src/libs/lib_nccl.h): while a thread's batch is set for a library, RemoteCall::Invoke
// appends that library's ordered calls to it, each with its device, and sends nothing. The
// library's hand-written code sends the batch as one message. Thread-local, owned by that code.
struct CallBatch {
  uint16_t library = 0;
  struct Call {
    int device;
    uint32_t function;
    std::vector<std::byte> args;
  };
  std::vector<Call> calls;
};
// The calling thread's batch, or nullptr.
CallBatch*& ThreadCallBatch();

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
  // The call runs on device `ordinal` though no argument names it (sent as nothing).
  Status OnDevice(int ordinal) { return Claim(ordinal); }
  // The arguments encoded so far (a call a hand-written stub batches itself).
  const std::vector<std::byte>& args() const { return args_.bytes(); }
  // A bad argument, in the library's own vocabulary.
  Status Fail(uint32_t code, const char* what) const;

  // ---- math-library objects (lib_objects.h) ----------------------------------------------
  // A live object of `kind` of this process (0 only if nullable); its device decides the
  // call's device unless an earlier argument did. An object of another kind that serves as
  // `kind` (HandleKindServes) is accepted unless `ends` (the call ends the object).
  Status Object(HandleKind kind, uint64_t id, bool nullable, bool ends = false);
  // Mints the id of the object this call creates and sends it.
  uint64_t NewObject(HandleKind kind);
  // After the call went out: the object it created exists (on the call's device), it ended
  // one, or it changed one (its content digest moves: memoised queries naming it are asked
  // again unless it is back to a content seen before).
  void AdoptObject(uint64_t id, HandleKind kind);
  void ForgetObject(uint64_t id);
  void TouchObject(uint64_t id);
  // Whether bit `bit` of the object's mirrored pointer mode says "device pointer".
  bool ObjectMode(uint64_t id, int bit) const;
  // Answers the call from the process's memo when the same arguments (objects by content)
  // were asked on the same device before; remembers a successful answer.
  void Memoize() { memo_ = true; }
  // An ordered call sent as a round trip this time: its status is waited for and returned
  // (the description's `answer_if` hook decided the application needs it now).
  void Answer() {
    if (cls_ == CallClass::kOrdered) cls_ = CallClass::kSync;
  }

  // A synchronisation or query of the call's stream (the description's `idle`): answered
  // here, without a round trip, when nothing was sent since that stream was last drained
  // (Client::StreamIdle); once it succeeded, the stream is drained.
  // Called before the stream argument is encoded (the generated stubs do).
  void AnswerIfIdle() { idle_ = true; }

  // Sends the call and, for sync and wait calls, waits for the reply and hands its results to
  // `results`. A wait call also reports the first failure of earlier asynchronous work.
  Status Invoke(FunctionRef<Status(api::ArgReader&)> results = {});

 private:
  // FNV-1a of the library, function and argument bytes, each object id replaced by its
  // content digest (`self`, if not 0, by `self_content`).
  uint64_t Digest(uint64_t self, uint64_t self_content) const;

  CallCtx cc_;
  bool memo_ = false;
  bool idle_ = false;
  bool has_stream_ = false;  // with idle_: stream_key_ is the first stream argument's
  StreamKey stream_key_;
  struct ObjectArg {
    size_t offset;     // of its id in the arguments
    uint64_t id;
    uint64_t content;  // its digest when it was named
  };
  std::vector<ObjectArg> objects_;
  uint16_t library_;
  uint32_t function_;
  CallClass cls_;
  Domain domain_;
  int device_ = -1;
  int default_stream_device_ = -1;  // several servers: a default stream's (current) device
  // Makes `device` the call's device, or checks it is on the same server as the call's.
  Status Claim(int device);
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

// A math library's own statuses for what Remora reports in the runtime's vocabulary.
struct LibCodes {
  uint32_t ok, invalid, lost, unsupported, nomem, internal;
};
// FinishApi for a math library: its own statuses pass unchanged; Remora's (a bad argument,
// a lost server, an exhausted quota) become the library's nearest status.
uint32_t FinishLib(Domain caller, const LibCodes& codes, const Status& st, const char* call);

// A library object handle as the id that travels, and back: pointer handles are the id
// itself, except that the top bit of a kind of 0x80 and above is cleared in what the
// application sees: a handle must read as a positive intptr_t (CuPy keeps its cuSOLVER and
// cuSPARSE handles as intptr_t and passes them on as size_t, which refuses a negative value);
// int handles (cufftHandle) are the id's counter.
template <typename T>
uint64_t HandleBits(HandleKind kind, T v) {
  if constexpr (std::is_pointer_v<T>) {
    uint64_t u = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(v));
    const auto k = static_cast<uint8_t>(kind);
    if ((k & 0x80u) != 0 && (u >> 56) == (k & 0x7fu)) u |= uint64_t{1} << 63;
    return u;
  } else {
    static_assert(std::is_integral_v<T>, "a library handle is a pointer or an integer");
    return v <= 0 ? 0 : (uint64_t{static_cast<uint8_t>(kind)} << 56) | (static_cast<uint64_t>(v) << 4);
  }
}
template <typename T>
T HandleFromBits(HandleKind kind, uint64_t id) {
  (void)kind;
  if constexpr (std::is_pointer_v<T>) {
    return reinterpret_cast<T>(static_cast<uintptr_t>(id & ~(uint64_t{1} << 63)));
  } else {
    return static_cast<T>((id >> 4) & 0x7fffffffull);
  }
}
// An entry the description marks unsupported: logs its name once, returns `code`.
uint32_t NotSupported(Domain caller, uint32_t code, const char* call);
// An entry the description marks refused (model.py REFUSAL_REASONS): logs its name and why
// once, returns `code`.
uint32_t Refused(Domain caller, uint32_t code, const char* call, const char* reason);

}  // namespace remora::shim
