// The batched and peer copy forms, composed from the single copies (memops.h):
// cudaMemcpyBatchAsync, cudaMemcpy3DBatchAsync, cudaMemcpy3DPeer[Async]. A batch is issued in
// order on its stream, which satisfies "in stream order, in no particular order within the
// batch". A source whose access order is cudaMemcpySrcAccessOrderDuringApiCall is read
// before the call returns (host sources are packed here and shipped with the request; device
// sources are read in stream order, as CUDA allows only for device memory). An operation with
// a CUDA array operand is a 3D copy (api_array_copy.cc); a peer copy with an array between two
// devices is staged through linear memory on each side.
#include <cuda_runtime_api.h>

#include <cstring>
#include <vector>

#include "arrays.h"
#include "export.h"
#include "memops.h"
#include "runtime.h"
#include "wire_args.h"

// The runtime's per-thread-stream entry points (not declared without --default-stream per-thread).
extern "C" {
cudaError_t cudaMemcpy3D_ptds(const cudaMemcpy3DParms*);
cudaError_t cudaMemcpy3DAsync_ptsz(const cudaMemcpy3DParms*, cudaStream_t);
cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t);
}

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

// Bytes per element of array `a`, or 0 if it is not an array of this process.
size_t ElemBytes(cudaArray_t a) {
  auto e = ClientArrays::Get().FindArray(reinterpret_cast<uint64_t>(a));
  return e ? e->elem : 0;
}

// A batch operation with an array operand as the 3D copy it is (widths in elements, a
// pointer operand's row length and layer height in elements of the array).
Result<cudaMemcpy3DParms> ArrayOp(const cudaMemcpy3DBatchOp& op) {
  cudaArray_t array = op.src.type == cudaMemcpyOperandTypeArray ? op.src.op.array.array : op.dst.op.array.array;
  size_t elem = ElemBytes(array);
  if (elem == 0) return Error(Err::kInvalidResourceHandle, "not an array of this process");
  cudaMemcpy3DParms p{};
  auto side = [&](const cudaMemcpy3DOperand& o, cudaArray_t* arr, cudaPos* pos, cudaPitchedPtr* ptr) -> Status {
    if (o.type == cudaMemcpyOperandTypeArray) {
      if (ElemBytes(o.op.array.array) == 0) return Error(Err::kInvalidResourceHandle, "not an array of this process");
      *arr = o.op.array.array;
      *pos = cudaPos{o.op.array.offset.x, o.op.array.offset.y, o.op.array.offset.z};
      return Status::Ok();
    }
    if (o.type != cudaMemcpyOperandTypePointer) return Error(Err::kInvalidValue, "an invalid operand type");
    size_t row = o.op.ptr.rowLength != 0 ? o.op.ptr.rowLength : op.extent.width;
    size_t layer = o.op.ptr.layerHeight != 0 ? o.op.ptr.layerHeight : op.extent.height;
    *ptr = cudaPitchedPtr{o.op.ptr.ptr, row * elem, op.extent.width * elem, layer};
    return Status::Ok();
  };
  RETURN_IF_ERROR(side(op.src, &p.srcArray, &p.srcPos, &p.srcPtr));
  RETURN_IF_ERROR(side(op.dst, &p.dstArray, &p.dstPos, &p.dstPtr));
  p.extent = op.extent;
  p.kind = cudaMemcpyDefault;
  return p;
}

bool HasArray(const cudaMemcpy3DBatchOp& op) {
  return op.src.type == cudaMemcpyOperandTypeArray || op.dst.type == cudaMemcpyOperandTypeArray;
}

cudaError_t Batch3D(size_t n, cudaMemcpy3DBatchOp* ops, unsigned long long flags, cudaStream_t stream, bool per_thread) {
  const char* call = "cudaMemcpy3DBatchAsync";
  if (n == 0 || ops == nullptr || flags != 0) return Finish(Error(Err::kInvalidValue, "an invalid batch"), call);
  if (LegacyStream(stream) && !per_thread) return Finish(Error(Err::kInvalidValue, "a batch cannot use the legacy stream"), call);
  for (size_t i = 0; i < n; i++) {
    const cudaMemcpy3DBatchOp& op = ops[i];
    if (HasArray(op)) {
      if (op.extent.width == 0 || op.extent.height == 0 || op.extent.depth == 0)
        return Finish(Error(Err::kInvalidValue, "operation {}: an empty extent", i), call);
      if (Status st = CheckOrder(op.srcAccessOrder); !st.ok()) return Finish(st, call);
      if (auto p = ArrayOp(op); !p.ok()) return Finish(p.status(), call);
      continue;
    }
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
    if (HasArray(op)) {
      cudaMemcpy3DParms p = *ArrayOp(op);
      cudaError_t err = per_thread ? cudaMemcpy3DAsync_ptsz(&p, stream) : cudaMemcpy3DAsync(&p, stream);
      if (err != cudaSuccess) return err;
      continue;
    }
    auto pitch = [&](const cudaMemcpy3DOperand& o) { return o.op.ptr.rowLength != 0 ? o.op.ptr.rowLength : op.extent.width; };
    auto rows = [&](const cudaMemcpy3DOperand& o) { return o.op.ptr.layerHeight != 0 ? o.op.ptr.layerHeight : op.extent.height; };
    cudaError_t err = BatchCopy(op.dst.op.ptr.ptr, pitch(op.dst), rows(op.dst), op.src.op.ptr.ptr, pitch(op.src), rows(op.src),
                                op.extent, op.srcAccessOrder, stream, per_thread, call);
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

cudaError_t Copy3DPeer(const cudaMemcpy3DPeerParms* p, cudaStream_t stream, bool per_thread, bool async, const char* call);

// A 3D copy on `device`.
cudaError_t Copy3DOn(int device, const cudaMemcpy3DParms& p, cudaStream_t stream, bool per_thread, bool async) {
  ThreadState& t = Thread();
  int saved = t.device;
  t.device = device;
  cudaError_t err = !async ? (per_thread ? cudaMemcpy3D_ptds(&p) : cudaMemcpy3D(&p))
                           : (per_thread ? cudaMemcpy3DAsync_ptsz(&p, stream) : cudaMemcpy3DAsync(&p, stream));
  t.device = saved;
  return err;
}

// A peer copy with an array side. On one device it is a 3D copy; between two, the array's
// side goes through packed linear memory on its device and the bytes cross as a peer copy.
// The staged form completes before it returns (the stream's earlier work first).
cudaError_t ArrayPeer(const cudaMemcpy3DPeerParms& p, cudaStream_t stream, bool per_thread, bool async, const char* call) {
  cudaMemcpy3DParms c{};
  c.srcArray = p.srcArray, c.srcPos = p.srcPos, c.srcPtr = p.srcPtr;
  c.dstArray = p.dstArray, c.dstPos = p.dstPos, c.dstPtr = p.dstPtr;
  c.extent = p.extent;
  c.kind = cudaMemcpyDeviceToDevice;
  if (p.srcDevice == p.dstDevice) return Copy3DOn(p.srcDevice, c, stream, per_thread, async);
  size_t elem = p.srcArray != nullptr ? ElemBytes(p.srcArray) : ElemBytes(p.dstArray);
  if (elem == 0) return Finish(Error(Err::kInvalidResourceHandle, "not an array of this process"), call);
  const cudaExtent& e = p.extent;
  if (e.width == 0 || e.height == 0 || e.depth == 0) return cudaSuccess;
  size_t row = e.width * elem, bytes = row * e.height * e.depth;
  if (async) {
    cudaError_t err = per_thread ? cudaStreamSynchronize_ptsz(stream) : cudaStreamSynchronize(stream);
    if (err != cudaSuccess) return err;
  }
  // Each side's packed stage (an array's), or its own memory.
  void* stage[2] = {nullptr, nullptr};
  int devices[2] = {p.srcDevice, p.dstDevice};
  cudaError_t err = cudaSuccess;
  for (int s = 0; s < 2 && err == cudaSuccess; s++) {
    if ((s == 0 ? p.srcArray : p.dstArray) == nullptr) continue;
    ThreadState& t = Thread();
    int saved = t.device;
    t.device = devices[s];
    err = cudaMalloc(&stage[s], bytes);
    t.device = saved;
  }
  cudaPitchedPtr packed_src = stage[0] ? cudaPitchedPtr{stage[0], row, row, e.height} : p.srcPtr;
  cudaPitchedPtr packed_dst = stage[1] ? cudaPitchedPtr{stage[1], row, row, e.height} : p.dstPtr;
  if (err == cudaSuccess && stage[0] != nullptr) {
    cudaMemcpy3DParms a{};
    a.srcArray = p.srcArray, a.srcPos = p.srcPos, a.dstPtr = packed_src, a.extent = e, a.kind = cudaMemcpyDeviceToDevice;
    err = Copy3DOn(p.srcDevice, a, nullptr, false, false);
  }
  if (err == cudaSuccess) {
    cudaMemcpy3DPeerParms q{};
    q.srcPtr = packed_src, q.srcPos = stage[0] ? cudaPos{} : p.srcPos, q.srcDevice = p.srcDevice;
    q.dstPtr = packed_dst, q.dstPos = stage[1] ? cudaPos{} : p.dstPos, q.dstDevice = p.dstDevice;
    // The linear sides count in bytes.
    q.extent = cudaExtent{row, e.height, e.depth};
    err = Copy3DPeer(&q, nullptr, false, false, call);
  }
  if (err == cudaSuccess && stage[1] != nullptr) {
    cudaMemcpy3DParms b{};
    b.srcPtr = packed_dst, b.dstArray = p.dstArray, b.dstPos = p.dstPos, b.extent = e, b.kind = cudaMemcpyDeviceToDevice;
    err = Copy3DOn(p.dstDevice, b, nullptr, false, false);
  }
  for (int s = 0; s < 2; s++)
    if (stage[s] != nullptr) {
      ThreadState& t = Thread();
      int saved = t.device;
      t.device = devices[s];
      (void)cudaFree(stage[s]);
      t.device = saved;
    }
  return err;
}

// Between devices a strided copy goes row by row (each a peer copy); on one device it is one
// strided copy.
cudaError_t Copy3DPeer(const cudaMemcpy3DPeerParms* p, cudaStream_t stream, bool per_thread, bool async, const char* call) {
  if (p == nullptr) return Finish(Error(Err::kInvalidValue, "p is NULL"), call);
  if (p->srcArray != nullptr || p->dstArray != nullptr) return ArrayPeer(*p, stream, per_thread, async, call);
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
