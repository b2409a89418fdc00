// Stream-capture queries and the calling thread's capture mode. Capture happens on the
// worker's streams (protocol/api/cuda.api @1000-@1005): while the session captures nothing
// - every reply says how many captures are active - the queries are answered here after
// checking the stream, as CUDA answers them outside a capture (PyTorch's allocator asks on
// every new segment, so they must not cost a round trip); while one is active they are
// asked of the worker, whose driver knows which streams joined it and whether it was
// invalidated. The capture mode is per thread; each request carries its thread's.
#include <cuda_runtime_api.h>

#include "cuda_client.h"
#include "export.h"
#include "remote_call.h"
#include "runtime.h"

namespace remora::shim {
namespace {

bool AnyCapture(Client* c) { return c->captures_active() > 0; }

cudaError_t IsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status, bool per_thread, const char* call) {
  if (status == nullptr) return Finish(Error(Err::kInvalidValue, "pCaptureStatus is NULL"), call);
  Runtime& rt = Runtime::Get();
  auto c = rt.Session();
  if (!c.ok()) return Finish(c.status(), call);
  if (AnyCapture(*c)) {
    CUstreamCaptureStatus s = CU_STREAM_CAPTURE_STATUS_NONE;
    Status st = gen::cuda::cuStreamIsCapturing(CallCtx{per_thread, call}, stream, &s);
    if (st.ok()) *status = static_cast<cudaStreamCaptureStatus>(s);
    return static_cast<cudaError_t>(FinishApi(Domain::kCudart, st, call));
  }
  int device = 0;
  Status st = rt.CheckStream(stream, &device);
  if (!st.ok()) return Finish(st, call);
  *status = cudaStreamCaptureStatusNone;
  return cudaSuccess;
}

cudaError_t CaptureInfo(cudaStream_t stream, cudaStreamCaptureStatus* status, unsigned long long* id, cudaGraph_t* graph,
                        const cudaGraphNode_t** deps, const cudaGraphEdgeData** edges, size_t* n, bool per_thread,
                        const char* call) {
  if (status == nullptr) return Finish(Error(Err::kInvalidValue, "captureStatus_out is NULL"), call);
  auto c = Runtime::Get().Session();
  if (!c.ok()) return Finish(c.status(), call);
  // Without a capture in the session the other outputs are undefined: answered here.
  if (!AnyCapture(*c)) return IsCapturing(stream, status, per_thread, call);
  CUstreamCaptureStatus s = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t capture_id = 0;
  Status st = gen::cuda::cuStreamGetCaptureInfo_v3(CallCtx{per_thread, call}, stream, &s, &capture_id, graph,
                                                   reinterpret_cast<const CUgraphNode**>(deps),
                                                   reinterpret_cast<const CUgraphEdgeData**>(edges), n);
  if (st.ok()) {
    *status = static_cast<cudaStreamCaptureStatus>(s);
    if (id != nullptr && s != CU_STREAM_CAPTURE_STATUS_NONE) *id = capture_id;
  }
  return static_cast<cudaError_t>(FinishApi(Domain::kCudart, st, call));
}

}  // namespace
}  // namespace remora::shim

using namespace remora;
using namespace remora::shim;

REMORA_API cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* pCaptureStatus) {
  return IsCapturing(stream, pCaptureStatus, false, "cudaStreamIsCapturing");
}
REMORA_API cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t stream, cudaStreamCaptureStatus* pCaptureStatus) {
  return IsCapturing(stream, pCaptureStatus, true, "cudaStreamIsCapturing");
}

REMORA_API cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream, cudaStreamCaptureStatus* captureStatus_out,
                                                unsigned long long* id_out, cudaGraph_t* graph_out,
                                                const cudaGraphNode_t** dependencies_out,
                                                const cudaGraphEdgeData** edgeData_out, size_t* numDependencies_out) {
  return CaptureInfo(stream, captureStatus_out, id_out, graph_out, dependencies_out, edgeData_out, numDependencies_out, false,
                     "cudaStreamGetCaptureInfo");
}
REMORA_API cudaError_t cudaStreamGetCaptureInfo_ptsz(cudaStream_t stream, cudaStreamCaptureStatus* captureStatus_out,
                                                     unsigned long long* id_out, cudaGraph_t* graph_out,
                                                     const cudaGraphNode_t** dependencies_out,
                                                     const cudaGraphEdgeData** edgeData_out, size_t* numDependencies_out) {
  return CaptureInfo(stream, captureStatus_out, id_out, graph_out, dependencies_out, edgeData_out, numDependencies_out, true,
                     "cudaStreamGetCaptureInfo");
}

REMORA_API cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  if (mode == nullptr) return Finish(Error(Err::kInvalidValue, "mode is NULL"), "cudaThreadExchangeStreamCaptureMode");
  cudaStreamCaptureMode m = *mode;
  if (m != cudaStreamCaptureModeGlobal && m != cudaStreamCaptureModeThreadLocal && m != cudaStreamCaptureModeRelaxed)
    return Finish(Error(Err::kInvalidValue, "unknown capture mode {}", static_cast<int>(m)), "cudaThreadExchangeStreamCaptureMode");
  *mode = static_cast<cudaStreamCaptureMode>(ThreadCaptureMode());
  ThreadCaptureMode() = static_cast<int>(m);
  return cudaSuccess;
}
