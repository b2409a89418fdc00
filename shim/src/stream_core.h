// Stream work and stream queries that both ABIs answer: the runtime's cuda* entry points
// (api_stream.cc, api_callback.cc, api_capture.cc) and the driver facade's cu* ones (driver/stream.cc) call
// down to these and convert the Status at their own boundary (Finish, driver::Done), so the
// driver never goes up to the runtime for them. Thread-safe; none touches the runtime's last
// error. `call` names the entry point in errors and in the generated calls it makes.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <functional>

#include "remora/base/status.h"

namespace remora::shim {

// A stream's flags, priority and device from the process's stream table (null outputs are
// not asked for).
Status StreamProperties(cudaStream_t stream, unsigned* flags, int* priority, int* device);

// Queues `fn` on `stream` (a host function): this process runs it when the stream gets there.
// `raw`, `raw_data`: the application's own function and argument, which a stream capture
// records as a host node (nullptr for work of Remora's own).
Status QueueHostFunction(cudaStream_t stream, std::function<void()> fn, bool per_thread, cudaHostFn_t raw = nullptr,
                         void* raw_data = nullptr);

// Whether `stream` is capturing: answered here after checking the stream while the session
// captures nothing, asked of the worker otherwise.
Status StreamCaptureStatus(cudaStream_t stream, bool per_thread, const char* call, CUstreamCaptureStatus* status);

// cuStreamGetCaptureInfo_v3's answers (`id` written only while the stream captures; the other
// outputs are undefined outside a capture, as CUDA leaves them).
Status StreamCaptureInfo(cudaStream_t stream, bool per_thread, const char* call, CUstreamCaptureStatus* status,
                         cuuint64_t* id, CUgraph* graph, const CUgraphNode** deps, const CUgraphEdgeData** edges,
                         size_t* count);

// Sets the calling thread's capture mode to *mode and answers the previous one in *mode
// (cudaStreamCaptureMode values; anything else is an invalid value).
Status ExchangeCaptureMode(int* mode);

}  // namespace remora::shim
