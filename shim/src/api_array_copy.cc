// Copies to, from and between CUDA arrays (issue 14): every cudaMemcpy*Array* form and
// cudaMemcpy3D[Async] with an array side. Offsets and extents are checked against the
// array's descriptor (and pointer sides against this process's allocations) before anything
// travels; the copy is then one Copy3D request naming the array's session handle, host bytes
// packed on the wire like any strided copy. The worker checks it all again.
#include <cuda_runtime_api.h>

#include <cstring>
#include <vector>

#include "arrays.h"
#include "callbacks.h"
#include "export.h"
#include "memops.h"
#include "runtime.h"
#include "wire_args.h"

namespace remora::shim {
namespace {

Status CheckArraySide(const ArraySide& s, uint64_t width, uint64_t height, uint64_t depth, const char* which) {
  auto a = ClientArrays::Get().FindArray(s.array);
  if (!a) return Error(Err::kInvalidResourceHandle, "the {} array is not one of this process", which);
  if (a->elem == 0 || width % a->elem != 0 || s.x % a->elem != 0)
    return Error(Err::kInvalidValue, "a copy of {} bytes at byte {} of the {} array is not made of whole {}-byte elements",
                 width, s.x, which, a->elem);
  if (s.x > a->row_bytes() || width > a->row_bytes() - s.x || s.y > a->rows() || height > a->rows() - s.y ||
      s.z > a->slices() || depth > a->slices() - s.z)
    return Error(Err::kInvalidValue, "a copy of {}x{}x{} at ({}, {}, {}) runs past the {} array ({} bytes x {} x {})", width,
                 height, depth, s.x, s.y, s.z, which, a->row_bytes(), a->rows(), a->slices());
  return Status::Ok();
}

uint64_t Span(const ArraySide& s, uint64_t width, uint64_t height, uint64_t depth) {
  return ((depth - 1) * s.rows + (height - 1)) * s.pitch + width;
}

void SetSide(wire::Copy3D::Builder& m, const ArraySide& s, bool dst) {
  if (s.kind == ArraySide::kArray) {
    if (dst) {
      m.setDstArray(s.array);
      m.setDstX(s.x);
      m.setDstY(s.y);
      m.setDstZ(s.z);
    } else {
      m.setSrcArray(s.array);
      m.setSrcX(s.x);
      m.setSrcY(s.y);
      m.setSrcZ(s.z);
    }
    return;
  }
  if (dst) {
    m.setDst(U(s.ptr));
    m.setDstPitch(s.pitch);
    m.setDstHeight(s.rows);
  } else {
    m.setSrc(U(s.ptr));
    m.setSrcPitch(s.pitch);
    m.setSrcHeight(s.rows);
  }
}

}  // namespace

cudaError_t ArrayCopy(ArraySide dst, ArraySide src, uint64_t width, uint64_t height, uint64_t depth, cudaMemcpyKind kind,
                      cudaStream_t stream, bool per_thread, bool async, const char* call) {
  Runtime& rt = Runtime::Get();
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault)
    return Finish(Error(Err::kInvalidMemcpyDirection, "invalid cudaMemcpyKind {}", static_cast<int>(kind)), call);
  // An array is device memory: the kind must agree, and decides what a pointer side is.
  if ((dst.kind == ArraySide::kArray && (kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyHostToHost)) ||
      (src.kind == ArraySide::kArray && (kind == cudaMemcpyHostToDevice || kind == cudaMemcpyHostToHost)))
    return Finish(Error(Err::kInvalidMemcpyDirection, "the cudaMemcpyKind contradicts an array side"), call);
  auto side_of = [&](ArraySide& s, bool is_src) {
    if (s.kind == ArraySide::kArray) return;
    if (kind == cudaMemcpyDefault) s.kind = Classify(s.ptr) == Side::kDevice ? ArraySide::kDevice : ArraySide::kHost;
    else if (kind == cudaMemcpyDeviceToDevice) s.kind = ArraySide::kDevice;
    else s.kind = (is_src == (kind == cudaMemcpyHostToDevice)) ? ArraySide::kHost : ArraySide::kDevice;
    if (rt.managed().Contains(U(s.ptr))) s.kind = ArraySide::kDevice;  // managed memory is device memory
  };
  side_of(dst, false);
  side_of(src, true);
  auto c = rt.Session();
  if (!c.ok()) return Finish(c.status(), call);
  int device = 0;
  Status st = rt.CheckStream(stream, &device);
  if (!st.ok()) return Finish(st, call);
  if (width == 0 || height == 0 || depth == 0) return cudaSuccess;
  for (const ArraySide* s : {&dst, &src}) {
    const char* which = s == &dst ? "destination" : "source";
    if (s->kind == ArraySide::kArray) {
      st = CheckArraySide(*s, width, height, depth, which);
    } else {
      if (s->ptr == nullptr) st = Error(Err::kInvalidValue, "the {} pointer is NULL", which);
      else if ((height > 1 || depth > 1) && s->pitch < width)
        st = Error(Err::kInvalidPitchValue, "the {} pitch {} is smaller than the width {}", which, s->pitch, width);
      else if (depth > 1 && s->rows < height)
        st = Error(Err::kInvalidValue, "the {} slices of {} rows cannot hold {} rows", which, s->rows, height);
      else if (s->kind == ArraySide::kDevice) st = rt.CheckDeviceRange(U(s->ptr), Span(*s, width, height, depth));
    }
    if (!st.ok()) return Finish(st, call);
  }
  st = rt.managed().BeforeDeviceWork();
  if (!st.ok()) return Finish(st, call);
  Client* cl = *c;
  uint64_t total = width * height * depth;
  auto build = [&](wire::Copy3D::Kind k, bool is_async) {
    return [&, k, is_async](wire::Request::Builder& r) {
      auto m = r.initCopy3D();
      SetSide(m, dst, true);
      SetSide(m, src, false);
      m.setWidth(width);
      m.setHeight(height);
      m.setDepth(depth);
      m.setKind(k);
      SetStream(m.initStream(), stream, per_thread);
      m.setAsync(is_async);
    };
  };
  auto row = [&](const ArraySide& s, uint64_t y, uint64_t z) { return s.ptr + (z * s.rows + y) * s.pitch; };
  if (src.kind == ArraySide::kHost) {
    // Read now (see api_memory2d.cc): host functions queued before the copy run first.
    if (!async || rt.FindHost(src.ptr)) HostCallbacks::Get().WaitForRegistered();
    std::vector<char> packed;
    const char* data = src.ptr;
    if (!(src.pitch == width || (height == 1 && depth == 1)) || (depth > 1 && src.rows != height)) {
      packed.resize(total);
      char* out = packed.data();
      for (uint64_t z = 0; z < depth; z++)
        for (uint64_t y = 0; y < height; y++, out += width) std::memcpy(out, row(src, y, z), width);
      data = packed.data();
    }
    if (async) return Finish(cl->Post(device, build(wire::Copy3D::Kind::HOST_TO_DEVICE, true), AsBytes(data, total)), call);
    st = cl->Call(device, build(wire::Copy3D::Kind::HOST_TO_DEVICE, false), [](wire::Reply::Reader&) { return Status::Ok(); },
                  AsBytes(data, total));
    return FinishSync(cl, st, call);
  }
  if (dst.kind == ArraySide::kHost) {
    std::vector<char> packed;
    bool direct = (dst.pitch == width || (height == 1 && depth == 1)) && (depth == 1 || dst.rows == height);
    char* out = dst.ptr;
    if (!direct) {
      packed.resize(total);
      out = packed.data();
    }
    st = cl->Call(device, build(wire::Copy3D::Kind::DEVICE_TO_HOST, false), [](wire::Reply::Reader&) { return Status::Ok(); },
                  {}, AsWritableBytes(out, total));
    if (st.ok() && !direct) {
      const char* in = packed.data();
      for (uint64_t z = 0; z < depth; z++)
        for (uint64_t y = 0; y < height; y++, in += width) std::memcpy(row(dst, y, z), in, width);
    }
    return async ? Finish(st, call) : FinishSync(cl, st, call);
  }
  if (async) return Finish(cl->Post(device, build(wire::Copy3D::Kind::DEVICE_TO_DEVICE, true)), call);
  st = cl->Call(device, build(wire::Copy3D::Kind::DEVICE_TO_DEVICE, false), [](wire::Reply::Reader&) { return Status::Ok(); });
  return FinishSync(cl, st, call);
}

cudaError_t ArrayCopy3DParms(const cudaMemcpy3DParms* p, cudaStream_t stream, bool per_thread, bool async, const char* call) {
  // With an array, the extent and the array's position count its elements; a pointer's
  // position counts bytes (CUDA's cudaMemcpy3DParms).
  uint32_t elem = 0;
  for (cudaArray_t a : {p->srcArray, p->dstArray}) {
    if (a == nullptr) continue;
    auto e = ClientArrays::Get().FindArray(reinterpret_cast<uint64_t>(a));
    if (!e) return Finish(Error(Err::kInvalidResourceHandle, "an array of the copy is not one of this process"), call);
    if (elem != 0 && e->elem != elem)
      return Finish(Error(Err::kInvalidValue, "arrays of {}- and {}-byte elements", elem, e->elem), call);
    elem = e->elem;
  }
  auto side = [&](cudaArray_t a, const cudaPitchedPtr& pp, const cudaPos& pos) {
    ArraySide s;
    if (a != nullptr) {
      s.kind = ArraySide::kArray;
      s.array = reinterpret_cast<uint64_t>(a);
      s.x = pos.x * elem;
      s.y = pos.y;
      s.z = pos.z;
    } else {
      s.ptr = static_cast<char*>(pp.ptr) == nullptr ? nullptr
                                                    : static_cast<char*>(pp.ptr) + (pos.z * pp.ysize + pos.y) * pp.pitch + pos.x;
      s.pitch = pp.pitch;
      s.rows = pp.ysize;
    }
    return s;
  };
  return ArrayCopy(side(p->dstArray, p->dstPtr, p->dstPos), side(p->srcArray, p->srcPtr, p->srcPos), p->extent.width * elem,
                   p->extent.height, p->extent.depth, p->kind, stream, per_thread, async, call);
}

}  // namespace remora::shim

using namespace remora;
using namespace remora::shim;

namespace {

ArraySide ArrayAt(cudaArray_const_t a, size_t x, size_t y) {
  ArraySide s;
  s.kind = ArraySide::kArray;
  s.array = reinterpret_cast<uint64_t>(a);
  s.x = x;
  s.y = y;
  return s;
}

ArraySide Memory(const void* p, size_t pitch, size_t height) {
  ArraySide s;
  s.kind = ArraySide::kHost;  // decided by the copy's kind
  s.ptr = const_cast<char*>(static_cast<const char*>(p));
  s.pitch = pitch;
  s.rows = height;
  return s;
}

// The deprecated 1D forms copy `count` bytes from (wOffset, hOffset) on: within the row, or
// whole rows from the start of one (the layout CUDA's arrays give such a copy). Another span
// is refused with cudaErrorInvalidValue.
cudaError_t Linear(ArraySide array_side, const void* p, size_t count, bool to_array, cudaMemcpyKind kind,
                   cudaStream_t stream, bool per_thread, bool async, const char* call) {
  auto a = ClientArrays::Get().FindArray(array_side.array);
  if (!a) return Finish(Error(Err::kInvalidResourceHandle, "not an array of this process"), call);
  size_t width = count, height = 1;
  if (array_side.x + count > a->row_bytes() && array_side.x == 0 && a->row_bytes() != 0 && count % a->row_bytes() == 0) {
    width = a->row_bytes();
    height = count / a->row_bytes();
  }
  ArraySide mem = Memory(p, width, height);
  return to_array ? ArrayCopy(array_side, mem, width, height, 1, kind, stream, per_thread, async, call)
                  : ArrayCopy(mem, array_side, width, height, 1, kind, stream, per_thread, async, call);
}

cudaError_t ArrayToArray(cudaArray_t dst, size_t wd, size_t hd, cudaArray_const_t src, size_t ws, size_t hs, size_t width,
                         size_t height, cudaMemcpyKind kind, bool per_thread, const char* call) {
  if (kind != cudaMemcpyDeviceToDevice && kind != cudaMemcpyDefault)
    return Finish(Error(Err::kInvalidMemcpyDirection, "an array-to-array copy is device to device"), call);
  return ArrayCopy(ArrayAt(dst, wd, hd), ArrayAt(src, ws, hs), width, height, 1, kind, nullptr, per_thread, false, call);
}

}  // namespace

// ---- to an array ------------------------------------------------------------------------
REMORA_API cudaError_t cudaMemcpyToArray(cudaArray_t dst, size_t wOffset, size_t hOffset, const void* src, size_t count,
                                         cudaMemcpyKind kind) {
  return Linear(ArrayAt(dst, wOffset, hOffset), src, count, true, kind, nullptr, false, false, "cudaMemcpyToArray");
}
REMORA_API cudaError_t cudaMemcpyToArray_ptds(cudaArray_t dst, size_t wOffset, size_t hOffset, const void* src, size_t count,
                                              cudaMemcpyKind kind) {
  return Linear(ArrayAt(dst, wOffset, hOffset), src, count, true, kind, nullptr, true, false, "cudaMemcpyToArray");
}
REMORA_API cudaError_t cudaMemcpyToArrayAsync(cudaArray_t dst, size_t wOffset, size_t hOffset, const void* src, size_t count,
                                              cudaMemcpyKind kind, cudaStream_t stream) {
  return Linear(ArrayAt(dst, wOffset, hOffset), src, count, true, kind, stream, false, true, "cudaMemcpyToArrayAsync");
}
REMORA_API cudaError_t cudaMemcpyToArrayAsync_ptsz(cudaArray_t dst, size_t wOffset, size_t hOffset, const void* src,
                                                   size_t count, cudaMemcpyKind kind, cudaStream_t stream) {
  return Linear(ArrayAt(dst, wOffset, hOffset), src, count, true, kind, stream, true, true, "cudaMemcpyToArrayAsync");
}
REMORA_API cudaError_t cudaMemcpy2DToArray(cudaArray_t dst, size_t wOffset, size_t hOffset, const void* src, size_t spitch,
                                           size_t width, size_t height, cudaMemcpyKind kind) {
  return ArrayCopy(ArrayAt(dst, wOffset, hOffset), Memory(src, spitch, height), width, height, 1, kind, nullptr, false, false,
                   "cudaMemcpy2DToArray");
}
REMORA_API cudaError_t cudaMemcpy2DToArray_ptds(cudaArray_t dst, size_t wOffset, size_t hOffset, const void* src,
                                                size_t spitch, size_t width, size_t height, cudaMemcpyKind kind) {
  return ArrayCopy(ArrayAt(dst, wOffset, hOffset), Memory(src, spitch, height), width, height, 1, kind, nullptr, true, false,
                   "cudaMemcpy2DToArray");
}
REMORA_API cudaError_t cudaMemcpy2DToArrayAsync(cudaArray_t dst, size_t wOffset, size_t hOffset, const void* src,
                                                size_t spitch, size_t width, size_t height, cudaMemcpyKind kind,
                                                cudaStream_t stream) {
  return ArrayCopy(ArrayAt(dst, wOffset, hOffset), Memory(src, spitch, height), width, height, 1, kind, stream, false, true,
                   "cudaMemcpy2DToArrayAsync");
}
REMORA_API cudaError_t cudaMemcpy2DToArrayAsync_ptsz(cudaArray_t dst, size_t wOffset, size_t hOffset, const void* src,
                                                     size_t spitch, size_t width, size_t height, cudaMemcpyKind kind,
                                                     cudaStream_t stream) {
  return ArrayCopy(ArrayAt(dst, wOffset, hOffset), Memory(src, spitch, height), width, height, 1, kind, stream, true, true,
                   "cudaMemcpy2DToArrayAsync");
}

// ---- from an array ----------------------------------------------------------------------
REMORA_API cudaError_t cudaMemcpyFromArray(void* dst, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t count,
                                           cudaMemcpyKind kind) {
  return Linear(ArrayAt(src, wOffset, hOffset), dst, count, false, kind, nullptr, false, false, "cudaMemcpyFromArray");
}
REMORA_API cudaError_t cudaMemcpyFromArray_ptds(void* dst, cudaArray_const_t src, size_t wOffset, size_t hOffset,
                                                size_t count, cudaMemcpyKind kind) {
  return Linear(ArrayAt(src, wOffset, hOffset), dst, count, false, kind, nullptr, true, false, "cudaMemcpyFromArray");
}
REMORA_API cudaError_t cudaMemcpyFromArrayAsync(void* dst, cudaArray_const_t src, size_t wOffset, size_t hOffset,
                                                size_t count, cudaMemcpyKind kind, cudaStream_t stream) {
  return Linear(ArrayAt(src, wOffset, hOffset), dst, count, false, kind, stream, false, true, "cudaMemcpyFromArrayAsync");
}
REMORA_API cudaError_t cudaMemcpyFromArrayAsync_ptsz(void* dst, cudaArray_const_t src, size_t wOffset, size_t hOffset,
                                                     size_t count, cudaMemcpyKind kind, cudaStream_t stream) {
  return Linear(ArrayAt(src, wOffset, hOffset), dst, count, false, kind, stream, true, true, "cudaMemcpyFromArrayAsync");
}
REMORA_API cudaError_t cudaMemcpy2DFromArray(void* dst, size_t dpitch, cudaArray_const_t src, size_t wOffset, size_t hOffset,
                                             size_t width, size_t height, cudaMemcpyKind kind) {
  return ArrayCopy(Memory(dst, dpitch, height), ArrayAt(src, wOffset, hOffset), width, height, 1, kind, nullptr, false, false,
                   "cudaMemcpy2DFromArray");
}
REMORA_API cudaError_t cudaMemcpy2DFromArray_ptds(void* dst, size_t dpitch, cudaArray_const_t src, size_t wOffset,
                                                  size_t hOffset, size_t width, size_t height, cudaMemcpyKind kind) {
  return ArrayCopy(Memory(dst, dpitch, height), ArrayAt(src, wOffset, hOffset), width, height, 1, kind, nullptr, true, false,
                   "cudaMemcpy2DFromArray");
}
REMORA_API cudaError_t cudaMemcpy2DFromArrayAsync(void* dst, size_t dpitch, cudaArray_const_t src, size_t wOffset,
                                                  size_t hOffset, size_t width, size_t height, cudaMemcpyKind kind,
                                                  cudaStream_t stream) {
  return ArrayCopy(Memory(dst, dpitch, height), ArrayAt(src, wOffset, hOffset), width, height, 1, kind, stream, false, true,
                   "cudaMemcpy2DFromArrayAsync");
}
REMORA_API cudaError_t cudaMemcpy2DFromArrayAsync_ptsz(void* dst, size_t dpitch, cudaArray_const_t src, size_t wOffset,
                                                       size_t hOffset, size_t width, size_t height, cudaMemcpyKind kind,
                                                       cudaStream_t stream) {
  return ArrayCopy(Memory(dst, dpitch, height), ArrayAt(src, wOffset, hOffset), width, height, 1, kind, stream, true, true,
                   "cudaMemcpy2DFromArrayAsync");
}

// ---- between arrays (synchronous with respect to the host only for host memory: none) ----
REMORA_API cudaError_t cudaMemcpyArrayToArray(cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst, cudaArray_const_t src,
                                              size_t wOffsetSrc, size_t hOffsetSrc, size_t count, cudaMemcpyKind kind) {
  return ArrayToArray(dst, wOffsetDst, hOffsetDst, src, wOffsetSrc, hOffsetSrc, count, 1, kind, false, "cudaMemcpyArrayToArray");
}
REMORA_API cudaError_t cudaMemcpyArrayToArray_ptds(cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst,
                                                   cudaArray_const_t src, size_t wOffsetSrc, size_t hOffsetSrc, size_t count,
                                                   cudaMemcpyKind kind) {
  return ArrayToArray(dst, wOffsetDst, hOffsetDst, src, wOffsetSrc, hOffsetSrc, count, 1, kind, true, "cudaMemcpyArrayToArray");
}
REMORA_API cudaError_t cudaMemcpy2DArrayToArray(cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst, cudaArray_const_t src,
                                                size_t wOffsetSrc, size_t hOffsetSrc, size_t width, size_t height,
                                                cudaMemcpyKind kind) {
  return ArrayToArray(dst, wOffsetDst, hOffsetDst, src, wOffsetSrc, hOffsetSrc, width, height, kind, false,
                      "cudaMemcpy2DArrayToArray");
}
REMORA_API cudaError_t cudaMemcpy2DArrayToArray_ptds(cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst,
                                                     cudaArray_const_t src, size_t wOffsetSrc, size_t hOffsetSrc, size_t width,
                                                     size_t height, cudaMemcpyKind kind) {
  return ArrayToArray(dst, wOffsetDst, hOffsetDst, src, wOffsetSrc, hOffsetSrc, width, height, kind, true,
                      "cudaMemcpy2DArrayToArray");
}
