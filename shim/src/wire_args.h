// Turning runtime API arguments into request fields. Private to the shim.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

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

// The stream a call runs on: the application's handle, and whether stream 0 means the
// calling thread's per-thread default stream (the _ptsz/_ptds entry points).
inline void SetStream(wire::StreamRef::Builder b, cudaStream_t s, bool per_thread) {
  b.setHandle(U(s));
  b.setPerThread(per_thread);
}

}  // namespace remora::shim
