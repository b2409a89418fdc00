// Arguments of generated calls drawn from a fuzz input, for the call tables apigen writes
// (build/generated/api/<lib>_fuzz_calls.cc, tools/gen/apigen/emit_fuzz.py) and the target
// `api_reply`. Scalars and by-value structs are input bytes; streams, events, pools and
// device pointers are the live objects of the target's session (ApiFuzzObjects), unless the
// input asks for garbage, which the client or the worker must refuse. Not thread-safe: one
// per call.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_input.h"
#include "remora/base/status.h"
#include "remora/memmgr/handle_table.h"

namespace remora::fuzz {

// The session objects arguments may name (created once by the target).
struct ApiFuzzObjects {
  uint64_t stream = 0;   // a stream the application created
  uint64_t event = 0;    // an event the application created
  uint64_t pool = 0;     // device 0's default pool
  uint64_t devptr = 0;   // a live allocation of kDevPtrBytes
  static constexpr uint64_t kDevPtrBytes = 1 << 20;
};

class ApiFuzzArgs {
 public:
  static constexpr size_t kElements = 4;     // length of every array and out array
  static constexpr size_t kBufferBytes = 64;  // size of every sized in/out buffer
  static constexpr size_t kHookBufferBytes = 4096;

  ApiFuzzArgs(FuzzInput& in, const ApiFuzzObjects& objects) : in_(in), objects_(objects) {}

  template <typename T>
  T Value() {
    T v;
    std::memset(&v, 0, sizeof(v));
    auto b = in_.Bytes(sizeof(T));
    std::memcpy(&v, b.data(), b.size());
    return v;
  }
  template <typename T>
  std::vector<T> Values() {
    std::vector<T> v(kElements);
    for (auto& x : v) x = Value<T>();
    return v;
  }
  // A size or count that sizes one of the buffers here: 0..kElements.
  uint64_t Count() { return in_.Byte() % (kElements + 1); }
  std::string String() {
    auto b = in_.Bytes(in_.Byte() % 32);
    std::string s(reinterpret_cast<const char*>(b.data()), b.size());
    for (char& c : s)
      if (c == '\0') c = '.';
    return s;
  }
  // A zeroed buffer of kBufferBytes, owned by this object.
  void* Buffer() {
    buffers_.emplace_back(kBufferBytes);
    return buffers_.back().data();
  }
  // A zeroed buffer larger than any structure of the CUDA APIs (CUgraphNodeParams is 256
  // bytes), owned by this object: host memory a hand-written hook reads or writes.
  void* HookBuffer() {
    buffers_.emplace_back(kHookBufferBytes);
    return buffers_.back().data();
  }
  // True for about one pointer in sixteen: the application passes NULL.
  bool Null() { return in_.Byte() % 16 == 0; }
  bool PerThread() { return in_.Byte() % 4 == 0; }

  // One byte says which: the live object (most often), none (0), or garbage.
  template <typename T>
  T Stream() {
    return As<T>(Pick(objects_.stream, true));
  }
  template <typename T>
  T Handle(HandleKind kind) {
    uint64_t live = kind == HandleKind::kEvent ? objects_.event
                    : kind == HandleKind::kPool ? objects_.pool
                    : kind == HandleKind::kStream ? objects_.stream
                                                  : 0;
    return As<T>(Pick(live, false));
  }
  int Device() {
    uint8_t b = in_.Byte();
    return b < 200 ? b % 2 : static_cast<int>(static_cast<int8_t>(b));
  }
  template <typename T>
  T DevPtr() {
    uint8_t b = in_.Byte();
    uint64_t p = b < 240 ? objects_.devptr + (b % 16) * 4096 : Value<uint64_t>();
    return As<T>(p);
  }

 private:
  uint64_t Pick(uint64_t live, bool zero_ok) {
    uint8_t b = in_.Byte();
    if (b < 200) return live;
    if (b < 228) return zero_ok ? 0 : live;
    return Value<uint64_t>();
  }
  template <typename T>
  static T As(uint64_t v) {
    if constexpr (std::is_pointer_v<T>) return reinterpret_cast<T>(static_cast<uintptr_t>(v));
    else return static_cast<T>(v);
  }

  FuzzInput& in_;
  const ApiFuzzObjects& objects_;
  std::vector<std::vector<std::byte>> buffers_;
};

// One entry of a generated call table.
struct ApiFuzzCall {
  uint32_t number;    // the wire number (@N)
  const char* name;
  bool ordered;       // posted without a reply
  Status (*call)(ApiFuzzArgs&);
};

}  // namespace remora::fuzz
