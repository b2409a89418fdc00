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
#include "stream_core.h"

namespace remora::shim {
namespace {

bool AnyCapture(Client* c) { return c->captures_active() > 0; }

}  // namespace

Status StreamCaptureStatus(cudaStream_t stream, bool per_thread, const char* call, CUstreamCaptureStatus* status) {
  if (status == nullptr) return Error(Err::kInvalidValue, "the capture status's pointer is NULL");
  Runtime& rt = Runtime::Get();
  ASSIGN_OR_RETURN(Client * c, rt.Session());
  if (AnyCapture(c)) return gen::cuda::cuStreamIsCapturing(CallCtx{per_thread, call}, reinterpret_cast<CUstream>(stream), status);
  int device = 0;
  RETURN_IF_ERROR(rt.CheckStream(stream, &device));
  *status = CU_STREAM_CAPTURE_STATUS_NONE;
  return Status::Ok();
}

Status StreamCaptureInfo(cudaStream_t stream, bool per_thread, const char* call, CUstreamCaptureStatus* status,
                         cuuint64_t* id, CUgraph* graph, const CUgraphNode** deps, const CUgraphEdgeData** edges,
                         size_t* count) {
  if (status == nullptr) return Error(Err::kInvalidValue, "the capture status's pointer is NULL");
  ASSIGN_OR_RETURN(Client * c, Runtime::Get().Session());
  // Without a capture in the session the other outputs are undefined: answered here.
  if (!AnyCapture(c)) return StreamCaptureStatus(stream, per_thread, call, status);
  CUstreamCaptureStatus s = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t capture_id = 0;
  RETURN_IF_ERROR(gen::cuda::cuStreamGetCaptureInfo_v3(CallCtx{per_thread, call}, reinterpret_cast<CUstream>(stream), &s,
                                                       &capture_id, graph, deps, edges, count));
  *status = s;
  if (id != nullptr && s != CU_STREAM_CAPTURE_STATUS_NONE) *id = capture_id;
  return Status::Ok();
}

Status ExchangeCaptureMode(int* mode) {
  if (mode == nullptr) return Error(Err::kInvalidValue, "mode is NULL");
  int m = *mode;
  if (m != CU_STREAM_CAPTURE_MODE_GLOBAL && m != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL && m != CU_STREAM_CAPTURE_MODE_RELAXED)
    return Error(Err::kInvalidValue, "unknown capture mode {}", m);
  *mode = ThreadCaptureMode();
  ThreadCaptureMode() = m;
  return Status::Ok();
}

namespace {

// The runtime's answers: a capture status of the runtime's type, errors in the runtime's domain.
cudaError_t IsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status, bool per_thread, const char* call) {
  CUstreamCaptureStatus s = CU_STREAM_CAPTURE_STATUS_NONE;
  Status st = StreamCaptureStatus(stream, per_thread, call, status == nullptr ? nullptr : &s);
  if (st.ok()) *status = static_cast<cudaStreamCaptureStatus>(s);
  return static_cast<cudaError_t>(FinishApi(Domain::kCudart, st, call));
}

cudaError_t CaptureInfo(cudaStream_t stream, cudaStreamCaptureStatus* status, unsigned long long* id, cudaGraph_t* graph,
                        const cudaGraphNode_t** deps, const cudaGraphEdgeData** edges, size_t* n, bool per_thread,
                        const char* call) {
  CUstreamCaptureStatus s = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t capture_id = 0;
  Status st = StreamCaptureInfo(stream, per_thread, call, status == nullptr ? nullptr : &s, &capture_id,
                                reinterpret_cast<CUgraph*>(graph), reinterpret_cast<const CUgraphNode**>(deps),
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
  int m = mode == nullptr ? 0 : static_cast<int>(*mode);
  Status st = ExchangeCaptureMode(mode == nullptr ? nullptr : &m);
  if (st.ok()) *mode = static_cast<cudaStreamCaptureMode>(m);
  return Finish(st, "cudaThreadExchangeStreamCaptureMode");
}
