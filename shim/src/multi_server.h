// What spans the servers of a multi-server session (REMORA_SERVER="URL,URL..."; docs/
// ARCHITECTURE.md, "GPUs of several servers"): copies between their devices, and peer
// queries. Everything else a call names lies on one server, which the call goes to.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "remora/base/status.h"

namespace remora::shim {

// Copies `n` bytes from device memory `src` (on device `src_device`) to `dst` (on
// `dst_device`, served by another server) through this process's memory, in chunks.
// `stream` (with `per_thread`) is the application's: the side whose device it belongs to
// copies in its order, the other side on its device's legacy stream. Synchronous with respect
// to the host: it returns once the bytes are in the destination (CUDA allows an asynchronous
// copy to complete before it returns). Thread-safe.
Status CrossServerCopy(uint64_t dst, int dst_device, uint64_t src, int src_device, size_t n, cudaStream_t stream,
                       bool per_thread);

// cuStreamWaitEvent: an event of another server than the stream's is waited for here, the
// host blocking until it completed (nothing joins two servers' streams), after which the
// stream has nothing left to wait for; otherwise the server's own wait.
Status StreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags, bool per_thread, const char* call);

// cuDeviceCanAccessPeer: 0 between devices of two servers (no path joins their GPUs), else
// the server's answer.
Status CanAccessPeer(int* can_access, int device, int peer, const char* call);

}  // namespace remora::shim
