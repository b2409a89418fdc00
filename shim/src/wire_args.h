// Turning runtime API arguments into request fields. Private to the shim.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "stream_key.h"
#include "remora.capnp.h"

namespace remora::shim {

// The `value` of a device-to-host copy's reply when the copy was captured into a graph
// (nothing was copied; the graph's launches copy).
inline constexpr int64_t kCapturedCopy = 1;

// A pointer or an opaque CUDA handle as the 64-bit value the wire carries.
inline uint64_t U(const void* p) { return reinterpret_cast<uint64_t>(p); }

// Stream 0, cudaStreamLegacy or cudaStreamPerThread: a default stream of the current device.
inline bool IsDefaultStream(cudaStream_t s) {
  return s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread;
}

// `s` as the drained-stream notes name it (stream_key.h): stream 0 is the legacy stream,
// or with `per_thread` (a _ptsz/_ptds entry point) the calling thread's; `device` is the
// device whose default stream it is.
inline StreamKey StreamKeyOf(cudaStream_t s, bool per_thread, int device) {
  if (s == cudaStreamLegacy || (s == nullptr && !per_thread)) return {U(cudaStreamLegacy), 0, device};
  if (s == cudaStreamPerThread || s == nullptr) return {U(cudaStreamPerThread), ThreadId(), device};
  return {U(s), 0, -1};
}

// The stream a call runs on: the application's handle, and whether stream 0 means the
// calling thread's per-thread default stream (the _ptsz/_ptds entry points).
inline void SetStream(wire::StreamRef::Builder b, cudaStream_t s, bool per_thread) {
  b.setHandle(U(s));
  b.setPerThread(per_thread);
}

}  // namespace remora::shim
