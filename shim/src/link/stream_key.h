// StreamKey: a stream as the client's drained-stream notes name it (Client::StreamIdle). A
// value type; wire_args.h's StreamKeyOf makes one from a call's stream argument.
#pragma once

#include <cstdint>

namespace remora::shim {

// A created stream by its handle; a default stream by which one it is (the legacy stream or
// a thread's per-thread stream) and whose device.
struct StreamKey {
  uint64_t handle = 0;
  uint64_t thread = 0;  // a per-thread default stream's thread, else 0
  int device = -1;      // a default stream's device, else -1
  bool operator==(const StreamKey&) const = default;
};

// A small, stable id for the calling thread (its per-thread default stream; sent with each of
// its requests). Thread-safe.
uint64_t ThreadId();

}  // namespace remora::shim
