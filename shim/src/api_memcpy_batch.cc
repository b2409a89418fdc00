// The batched and peer copy forms, composed from the single copies (memops.h):
// cudaMemcpyBatchAsync, cudaMemcpy3DBatchAsync, cudaMemcpy3DPeer[Async]. A batch is issued in
// order on its stream, which satisfies "in stream order, in no particular order within the
// batch". A source whose access order is cudaMemcpySrcAccessOrderDuringApiCall is read
// before the call returns (host sources are packed here and shipped with the request; device
// sources are read in stream order, as CUDA allows only for device memory). CUDA arrays are
// not supported as operands yet (cudaErrorNotSupported).
#include <cuda_runtime_api.h>

#include <cstring>
#include <vector>

#include "export.h"
#include "memops.h"
#include "runtime.h"
#include "wire_args.h"

namespace remora::shim {
namespace {

bool LegacyStream(cudaStream_t s) { return s == nullptr || s == cudaStreamLegacy; }

Status CheckOrder(cudaMemcpySrcAccessOrder order) {
  if (order == cudaMemcpySrcAccessOrderStream || order == cudaMemcpySrcAccessOrderDuringApiCall ||
      order == cudaMemcpySrcAccessOrderAny)
    return Status::Ok();
  return Error(Err::kInvalidValue, "invalid source access order {}", static_cast<int>(order));
}

// One strided copy of a batch. `packed`: a host source read now (DuringApiCall).
cudaError_t BatchCopy(void* dst, size_t dpitch, size_t drows, const void* src, size_t spitch, size_t srows, cudaExtent e,
                      cudaMemcpySrcAccessOrder order, cudaStream_t stream, bool per_thread, const char* call) {
  std::vector<char> packed;
  if (order == cudaMemcpySrcAccessOrderDuringApiCall && Classify(src) == Side::kHost &&
      !Runtime::Get().managed().Contains(U(src))) {
    packed.resize(e.width * e.height * e.depth);
    char* out = packed.data();
    for (size_t z = 0; z < e.depth; z++)
      for (size_t y = 0; y < e.height; y++, out += e.width)
        std::memcpy(out, static_cast<const char*>(src) + (z * srows + y) * spitch, e.width);
    src = packed.data();
    spitch = e.width;
    srows = e.height;
  }
  return CopyStrided(dst, dpitch, drows, src, spitch, srows, e.width, e.height, e.depth, cudaMemcpyDefault, stream,
                     per_thread, true, call);
}

cudaError_t Batch(void* const* dsts, const void* const* srcs, const size_t* sizes, size_t count, cudaMemcpyAttributes* attrs,
                  size_t* idxs, size_t num_attrs, cudaStream_t stream, bool per_thread) {
  const char* call = "cudaMemcpyBatchAsync";
  if (dsts == nullptr || srcs == nullptr || sizes == nullptr || count == 0 || attrs == nullptr || idxs == nullptr ||
      num_attrs == 0 || num_attrs > count || idxs[0] != 0)
    return Finish(Error(Err::kInvalidValue, "an invalid batch (NULL arrays, no copies or attributes, attrsIdxs[0] != 0)"), call);
  if (LegacyStream(stream) && !per_thread) return Finish(Error(Err::kInvalidValue, "a batch cannot use the legacy stream"), call);
  for (size_t a = 0; a < num_attrs; a++) {
    if (a > 0 && (idxs[a] <= idxs[a - 1] || idxs[a] >= count))
      return Finish(Error(Err::kInvalidValue, "attrsIdxs is not increasing below count"), call);
    if (Status st = CheckOrder(attrs[a].srcAccessOrder); !st.ok()) return Finish(st, call);
  }
  size_t a = 0;
  for (size_t i = 0; i < count; i++) {
    if (a + 1 < num_attrs && idxs[a + 1] == i) a++;
    if (sizes[i] == 0) return Finish(Error(Err::kInvalidValue, "copy {} of the batch has size 0", i), call);
    cudaExtent e{sizes[i], 1, 1};
    cudaError_t err = BatchCopy(dsts[i], sizes[i], 1, srcs[i], sizes[i], 1, e, attrs[a].srcAccessOrder, stream, per_thread, call);
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

cudaError_t Batch3D(size_t n, cudaMemcpy3DBatchOp* ops, unsigned long long flags, cudaStream_t stream, bool per_thread) {
  const char* call = "cudaMemcpy3DBatchAsync";
  if (n == 0 || ops == nullptr || flags != 0) return Finish(Error(Err::kInvalidValue, "an invalid batch"), call);
  if (LegacyStream(stream) && !per_thread) return Finish(Error(Err::kInvalidValue, "a batch cannot use the legacy stream"), call);
  for (size_t i = 0; i < n; i++) {
    const cudaMemcpy3DBatchOp& op = ops[i];
    if (op.src.type == cudaMemcpyOperandTypeArray || op.dst.type == cudaMemcpyOperandTypeArray)
      return Finish(Error(Err::kNotSupported, "CUDA arrays are not supported by Remora"), call);
    if (op.src.type != cudaMemcpyOperandTypePointer || op.dst.type != cudaMemcpyOperandTypePointer ||
        op.extent.width == 0 || op.extent.height == 0 || op.extent.depth == 0)
      return Finish(Error(Err::kInvalidValue, "operation {}: an invalid operand type or an empty extent", i), call);
    if (Status st = CheckOrder(op.srcAccessOrder); !st.ok()) return Finish(st, call);
    // Pointer operands count in bytes; a row length or layer height of 0 means packed.
    auto pitch = [&](const cudaMemcpy3DOperand& o) { return o.op.ptr.rowLength != 0 ? o.op.ptr.rowLength : op.extent.width; };
    auto rows = [&](const cudaMemcpy3DOperand& o) { return o.op.ptr.layerHeight != 0 ? o.op.ptr.layerHeight : op.extent.height; };
    if (pitch(op.src) < op.extent.width || pitch(op.dst) < op.extent.width || rows(op.src) < op.extent.height ||
        rows(op.dst) < op.extent.height)
      return Finish(Error(Err::kInvalidValue, "operation {}: a row length or layer height is smaller than the extent", i), call);
  }
  for (size_t i = 0; i < n; i++) {
    const cudaMemcpy3DBatchOp& op = ops[i];
    auto pitch = [&](const cudaMemcpy3DOperand& o) { return o.op.ptr.rowLength != 0 ? o.op.ptr.rowLength : op.extent.width; };
    auto rows = [&](const cudaMemcpy3DOperand& o) { return o.op.ptr.layerHeight != 0 ? o.op.ptr.layerHeight : op.extent.height; };
    cudaError_t err = BatchCopy(op.dst.op.ptr.ptr, pitch(op.dst), rows(op.dst), op.src.op.ptr.ptr, pitch(op.src), rows(op.src),
                                op.extent, op.srcAccessOrder, stream, per_thread, call);
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

// Between devices a strided copy goes row by row (each a peer copy); on one device it is one
// strided copy.
cudaError_t Copy3DPeer(const cudaMemcpy3DPeerParms* p, cudaStream_t stream, bool per_thread, bool async, const char* call) {
  if (p == nullptr) return Finish(Error(Err::kInvalidValue, "p is NULL"), call);
  if (p->srcArray != nullptr || p->dstArray != nullptr)
    return Finish(Error(Err::kNotSupported, "CUDA arrays are not supported by Remora"), call);
  const cudaExtent& e = p->extent;
  auto at = [](const cudaPitchedPtr& pp, const cudaPos& pos) {
    return static_cast<char*>(pp.ptr) + (pos.z * pp.ysize + pos.y) * pp.pitch + pos.x;
  };
  char* dst = at(p->dstPtr, p->dstPos);
  char* src = at(p->srcPtr, p->srcPos);
  if (p->srcDevice == p->dstDevice)
    return CopyStrided(dst, p->dstPtr.pitch, p->dstPtr.ysize, src, p->srcPtr.pitch, p->srcPtr.ysize, e.width, e.height,
                       e.depth, cudaMemcpyDeviceToDevice, stream, per_thread, async, call);
  if (e.width == 0 || e.height == 0 || e.depth == 0) return cudaSuccess;
  if ((e.height > 1 || e.depth > 1) && (p->dstPtr.pitch < e.width || p->srcPtr.pitch < e.width))
    return Finish(Error(Err::kInvalidPitchValue, "a pitch is smaller than the width {}", e.width), call);
  for (size_t z = 0; z < e.depth; z++)
    for (size_t y = 0; y < e.height; y++) {
      cudaError_t err = MemcpyPeer(dst + (z * p->dstPtr.ysize + y) * p->dstPtr.pitch, p->dstDevice,
                                   src + (z * p->srcPtr.ysize + y) * p->srcPtr.pitch, p->srcDevice, e.width, stream, async, call);
      if (err != cudaSuccess) return err;
    }
  return cudaSuccess;
}

}  // namespace
}  // namespace remora::shim

using namespace remora;
using namespace remora::shim;

REMORA_API cudaError_t cudaMemcpyBatchAsync(void* const* dsts, const void* const* srcs, const size_t* sizes, size_t count,
                                            cudaMemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs, cudaStream_t stream) {
  return Batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, stream, false);
}
REMORA_API cudaError_t cudaMemcpyBatchAsync_ptsz(void* const* dsts, const void* const* srcs, const size_t* sizes, size_t count,
                                                 cudaMemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs,
                                                 cudaStream_t stream) {
  return Batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, stream, true);
}
REMORA_API cudaError_t cudaMemcpy3DBatchAsync(size_t numOps, cudaMemcpy3DBatchOp* opList, unsigned long long flags,
                                              cudaStream_t stream) {
  return Batch3D(numOps, opList, flags, stream, false);
}
REMORA_API cudaError_t cudaMemcpy3DBatchAsync_ptsz(size_t numOps, cudaMemcpy3DBatchOp* opList, unsigned long long flags,
                                                   cudaStream_t stream) {
  return Batch3D(numOps, opList, flags, stream, true);
}
REMORA_API cudaError_t cudaMemcpy3DPeer(const cudaMemcpy3DPeerParms* p) { return Copy3DPeer(p, nullptr, false, false, "cudaMemcpy3DPeer"); }
REMORA_API cudaError_t cudaMemcpy3DPeer_ptds(const cudaMemcpy3DPeerParms* p) {
  return Copy3DPeer(p, nullptr, true, false, "cudaMemcpy3DPeer");
}
REMORA_API cudaError_t cudaMemcpy3DPeerAsync(const cudaMemcpy3DPeerParms* p, cudaStream_t stream) {
  return Copy3DPeer(p, stream, false, true, "cudaMemcpy3DPeerAsync");
}
REMORA_API cudaError_t cudaMemcpy3DPeerAsync_ptsz(const cudaMemcpy3DPeerParms* p, cudaStream_t stream) {
  return Copy3DPeer(p, stream, true, true, "cudaMemcpy3DPeerAsync");
}
