#include "multi_server.h"

#include <algorithm>
#include <memory>

#include "cuda_client.h"
#include "export.h"
#include "remote_call.h"
#include "runtime.h"
#include "wire_args.h"

namespace remora::shim {

namespace {
// The staging buffer's size: a copy larger than this goes in pieces.
constexpr size_t kChunk = 16 << 20;

bool OnDevice(cudaStream_t stream, int device) {
  int d = -1;
  return !IsDefaultStream(stream) && Runtime::Get().CheckStream(stream, &d).ok() && d == device;
}
}  // namespace

Status CrossServerCopy(uint64_t dst, int dst_device, uint64_t src, int src_device, size_t n, cudaStream_t stream,
                       bool per_thread) {
  Runtime& rt = Runtime::Get();
  ASSIGN_OR_RETURN(Client * from, rt.SessionFor(src_device));
  ASSIGN_OR_RETURN(Client * to, rt.SessionFor(dst_device));
  int stream_device = -1;
  RETURN_IF_ERROR(rt.CheckStream(stream, &stream_device));
  bool src_stream = OnDevice(stream, src_device), dst_stream = OnDevice(stream, dst_device);
  if (!src_stream && !dst_stream && !IsDefaultStream(stream))
    return Error(Err::kInvalidValue, "the stream belongs to device {}, neither {} nor {} of the copy", stream_device,
                 src_device, dst_device);
  std::unique_ptr<std::byte[]> buf(new (std::nothrow) std::byte[std::min(n, kChunk)]);
  if (!buf) return Error(Err::kMemoryAllocation, "no host memory to stage a copy between two Remora servers");
  for (size_t at = 0; at < n; at += kChunk) {
    size_t len = std::min(kChunk, n - at);
    RETURN_IF_ERROR(from->Call(src_device, [&](wire::Request::Builder& r) {
      auto m = r.initMemcpyDtoH();
      m.setSrc(src + at);
      m.setSize(len);
      SetStream(m.initStream(), src_stream ? stream : nullptr, src_stream && per_thread);
      m.setClientAddr(U(buf.get()));
    }, [](wire::Reply::Reader&) { return Status::Ok(); }, {}, MutableBytes(buf.get(), len)));
    RETURN_IF_ERROR(to->Call(dst_device, [&](wire::Request::Builder& r) {
      auto m = r.initMemcpyHtoD();
      m.setDst(dst + at);
      m.setSize(len);
      SetStream(m.initStream(), dst_stream ? stream : nullptr, dst_stream && per_thread);
      m.setClientAddr(U(buf.get()));
    }, [](wire::Reply::Reader&) { return Status::Ok(); }, ConstBytes(buf.get(), len)));
  }
  return Status::Ok();
}

Status StreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags, bool per_thread, const char* call) {
  Runtime& rt = Runtime::Get();
  if (rt.server_count() > 1 && event != nullptr && rt.CheckEvent(event).ok()) {
    int stream_device = -1;
    RETURN_IF_ERROR(rt.CheckStream(stream, &stream_device));
    int event_device = rt.EventDevice(U(event));
    if (event_device >= 0 && !rt.SameServer(stream_device, event_device))
      return gen::cuda::cuEventSynchronize(CallCtx{false, call}, reinterpret_cast<CUevent>(event));
  }
  return gen::cuda::cuStreamWaitEvent(CallCtx{per_thread, call}, reinterpret_cast<CUstream>(stream),
                                      reinterpret_cast<CUevent>(event), flags);
}

Status CanAccessPeer(int* can_access, int device, int peer, const char* call) {
  Runtime& rt = Runtime::Get();
  RETURN_IF_ERROR(rt.Device(device).status());
  RETURN_IF_ERROR(rt.Device(peer).status());
  if (can_access != nullptr && !rt.SameServer(device, peer)) {
    *can_access = 0;
    return Status::Ok();
  }
  return gen::cuda::cuDeviceCanAccessPeer(CallCtx{false, call}, can_access, device, peer);
}

}  // namespace remora::shim

using namespace remora;
using namespace remora::shim;

REMORA_API cudaError_t cudaDeviceCanAccessPeer(int* canAccessPeer, int device, int peerDevice) {
  return Finish(CanAccessPeer(canAccessPeer, device, peerDevice, "cudaDeviceCanAccessPeer"), "cudaDeviceCanAccessPeer");
}
REMORA_API cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  return Finish(StreamWaitEvent(stream, event, flags, false, "cudaStreamWaitEvent"), "cudaStreamWaitEvent");
}
REMORA_API cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  return Finish(StreamWaitEvent(stream, event, flags, true, "cudaStreamWaitEvent"), "cudaStreamWaitEvent");
}
