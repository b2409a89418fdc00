// Stream-capture queries. Remora does not capture streams yet (cudaStreamBeginCapture is not
// supported), so no capture can be active: the queries are answered in the client after
// checking the stream, as CUDA answers them outside a capture. PyTorch's allocator asks on
// every new segment, so these must not cost a round trip. The capture mode is per thread.
#include <cuda_runtime_api.h>

#include "export.h"
#include "runtime.h"

namespace remora::shim {
namespace {

cudaError_t IsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status, const char* call) {
  if (status == nullptr) return Finish(Error(Err::kInvalidValue, "pCaptureStatus is NULL"), call);
  Runtime& rt = Runtime::Get();
  auto c = rt.Session();
  if (!c.ok()) return Finish(c.status(), call);
  int device = 0;
  Status st = rt.CheckStream(stream, &device);
  if (!st.ok()) return Finish(st, call);
  *status = cudaStreamCaptureStatusNone;
  return cudaSuccess;
}

cudaError_t CaptureInfo(cudaStream_t stream, cudaStreamCaptureStatus* status, const char* call) {
  if (status == nullptr) return Finish(Error(Err::kInvalidValue, "captureStatus_out is NULL"), call);
  // The other outputs are defined only while a capture is active.
  return IsCapturing(stream, status, call);
}

}  // namespace
}  // namespace remora::shim

using namespace remora;
using namespace remora::shim;

REMORA_API cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* pCaptureStatus) {
  return IsCapturing(stream, pCaptureStatus, "cudaStreamIsCapturing");
}
REMORA_API cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t stream, cudaStreamCaptureStatus* pCaptureStatus) {
  return IsCapturing(stream, pCaptureStatus, "cudaStreamIsCapturing");
}

REMORA_API cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream, cudaStreamCaptureStatus* captureStatus_out,
                                                unsigned long long*, cudaGraph_t*, const cudaGraphNode_t**,
                                                const cudaGraphEdgeData**, size_t*) {
  return CaptureInfo(stream, captureStatus_out, "cudaStreamGetCaptureInfo");
}
REMORA_API cudaError_t cudaStreamGetCaptureInfo_ptsz(cudaStream_t stream, cudaStreamCaptureStatus* captureStatus_out,
                                                     unsigned long long*, cudaGraph_t*, const cudaGraphNode_t**,
                                                     const cudaGraphEdgeData**, size_t*) {
  return CaptureInfo(stream, captureStatus_out, "cudaStreamGetCaptureInfo");
}

REMORA_API cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  if (mode == nullptr) return Finish(Error(Err::kInvalidValue, "mode is NULL"), "cudaThreadExchangeStreamCaptureMode");
  cudaStreamCaptureMode m = *mode;
  if (m != cudaStreamCaptureModeGlobal && m != cudaStreamCaptureModeThreadLocal && m != cudaStreamCaptureModeRelaxed)
    return Finish(Error(Err::kInvalidValue, "unknown capture mode {}", static_cast<int>(m)), "cudaThreadExchangeStreamCaptureMode");
  *mode = static_cast<cudaStreamCaptureMode>(Thread().capture_mode);
  Thread().capture_mode = static_cast<int>(m);
  return cudaSuccess;
}
