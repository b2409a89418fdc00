// Copies: host to device, device to host, device to device, strided 2D/3D copies and
// copies between devices. Every device range is checked against the session's own
// allocations first; the bytes then move through the pending ops of pending_transfer.h.
#include "remora/base/log.h"
#include "worker/ops/handlers.h"
#include "worker/ops/pending_transfer.h"

namespace remora::worker {
namespace {

// Memory only the device reads and writes (a host sees it only through this session's
// calls): a small synchronous copy into it may be answered before its DMA (pending_transfer.h).
// Not pinned, registered or mapped host memory, nor a graph's staging of host memory, nor
// managed memory (the client keeps a view of it), nor memory mapped into a reserved range
// (it may be another process's physical memory).
bool DeviceOnly(AllocKind kind) {
  switch (kind) {
    case AllocKind::kDevice:
    case AllocKind::kDeviceAsync:
    case AllocKind::kModule:
    case AllocKind::kGraphMemory: return true;
    default: return false;
  }
}

// Answers a device-to-host copy that went into a graph: no data, value 1 says so.
Status ReplyCaptured(Executor& ex, uint64_t tag, const Status& st) {
  if (!st.ok() || tag == 0) return ReplyOrDefer(ex, tag, st);
  return ex.PostReply(tag, st, [](wire::Reply::Builder& r) { r.setValue(1); });
}

// Checks a strided device region against the session's allocations.
Result<DeviceLayout> CheckLayout(Executor& ex, DevPtr base, uint64_t pitch, uint64_t rows_per_slice, uint64_t width,
                                 uint64_t height, uint64_t depth) {
  if (width == 0 || height == 0 || depth == 0) return DeviceLayout{base, pitch, rows_per_slice, width, height, depth};
  if ((height > 1 || depth > 1) && pitch < width)
    return Error(Err::kInvalidPitchValue, "pitch {} is smaller than the row width {}", pitch, width);
  if (depth > 1 && rows_per_slice < height)
    return Error(Err::kInvalidValue, "a slice of {} rows cannot hold {} rows", rows_per_slice, height);
  if (width > (1ull << 40) || height > (1ull << 32) || depth > (1ull << 32) || pitch > (1ull << 40))
    return Error(Err::kInvalidValue, "copy extent is out of range");
  DeviceLayout l{base, pitch, rows_per_slice, width, height, depth};
  RETURN_IF_ERROR(ex.session().CheckRange(base, l.extent()).status());
  return l;
}

// An array side of a copy: the session's array, the copy inside its extent.
Result<DeviceLayout> CheckArrayLayout(Executor& ex, uint64_t handle, uint64_t x, uint64_t y, uint64_t z, uint64_t width,
                                      uint64_t height, uint64_t depth) {
  ASSIGN_OR_RETURN(ArrayInfo * a, ex.session().array_objects().CheckCopy(handle, x, y, z, width, height, depth));
  DeviceLayout l;
  l.width = width;
  l.height = height;
  l.depth = depth;
  l.array = a->array;
  l.x0 = x;
  l.y0 = y;
  l.z0 = z;
  return l;
}

}  // namespace

Status Handlers::Copy3D(Executor& ex, const InFrame& frame, Req req) {
  auto a = req.getCopy3D();
  uint64_t tag = a.getAsync() ? 0 : frame.header.tag;
  uint64_t w = a.getWidth(), h = a.getHeight(), d = a.getDepth();
  bool h2d = a.getKind() == wire::Copy3D::Kind::HOST_TO_DEVICE;
  if (h2d && w * h * d != frame.header.bulk_bytes)
    return Error(Err::kInvalidValue, "2D/3D copy of {} bytes carries {} bytes of data", w * h * d, frame.header.bulk_bytes);
  if (!h2d && frame.header.bulk_bytes != 0) return Error(Err::kInvalidValue, "unexpected data with a 2D/3D copy");
  auto stream = ex.ResolveStream(a.getStream(), req.getThread(), req.getDevice());
  if (stream.ok() && a.getKind() != wire::Copy3D::Kind::DEVICE_TO_DEVICE) {
    auto capturing = ex.Capturing(*stream);
    if (!capturing.ok() || *capturing) {
      Status st = capturing.ok() ? Error(Err::kNotSupported,
                                         "a 2D/3D copy between device memory and host memory the server cannot reach "
                                         "cannot be captured (use pinned memory over shm, or a linear copy)")
                                 : capturing.status();
      if (h2d && frame.header.bulk_bytes > 0) {
        ex.AddPending(MakeDrainOp(tag, frame.header.bulk_bytes, st));
        return Status::Ok();
      }
      return ReplyOrDefer(ex, h2d ? tag : frame.header.tag, st);
    }
  }
  switch (a.getKind()) {
    case wire::Copy3D::Kind::HOST_TO_DEVICE: {
      auto dst = a.getDstArray() != 0 ? CheckArrayLayout(ex, a.getDstArray(), a.getDstX(), a.getDstY(), a.getDstZ(), w, h, d)
                                      : CheckLayout(ex, a.getDst(), a.getDstPitch(), a.getDstHeight(), w, h, d);
      Status st = !dst.ok() ? dst.status() : stream.status();
      if (!st.ok()) {
        if (frame.header.bulk_bytes == 0) return ReplyOrDefer(ex, tag, st);
        ex.AddPending(MakeDrainOp(tag, frame.header.bulk_bytes, st));
        return Status::Ok();
      }
      if (dst->total() == 0) return ReplyOrDefer(ex, tag, Status::Ok());
      ex.AddPending(MakeHtoDOp(tag, *stream, *dst));
      return Status::Ok();
    }
    case wire::Copy3D::Kind::DEVICE_TO_HOST: {
      tag = frame.header.tag;  // the data is the reply
      auto src = a.getSrcArray() != 0 ? CheckArrayLayout(ex, a.getSrcArray(), a.getSrcX(), a.getSrcY(), a.getSrcZ(), w, h, d)
                                      : CheckLayout(ex, a.getSrc(), a.getSrcPitch(), a.getSrcHeight(), w, h, d);
      if (!src.ok()) return ex.PostReply(tag, src.status());
      if (!stream.ok()) return ex.PostReply(tag, stream.status());
      return StartDtoH(ex, tag, *stream, *src);
    }
    case wire::Copy3D::Kind::DEVICE_TO_DEVICE: {
      auto dst = a.getDstArray() != 0 ? CheckArrayLayout(ex, a.getDstArray(), a.getDstX(), a.getDstY(), a.getDstZ(), w, h, d)
                                      : CheckLayout(ex, a.getDst(), a.getDstPitch(), a.getDstHeight(), w, h, d);
      if (!dst.ok()) return ReplyOrDefer(ex, tag, dst.status());
      auto src = a.getSrcArray() != 0 ? CheckArrayLayout(ex, a.getSrcArray(), a.getSrcX(), a.getSrcY(), a.getSrcZ(), w, h, d)
                                      : CheckLayout(ex, a.getSrc(), a.getSrcPitch(), a.getSrcHeight(), w, h, d);
      if (!src.ok()) return ReplyOrDefer(ex, tag, src.status());
      if (!stream.ok()) return ReplyOrDefer(ex, tag, stream.status());
      Status st = ex.SetDevice(stream->gpu);
      if (st.ok() && w * h * d > 0)
        st = ex.driver().Copy3D(dst->Whole(), src->Whole(), w, h, d, stream->stream);
      if (!st.ok() || tag == 0) return ReplyOrDefer(ex, tag, st);
      return ReplyWhenDone(ex, tag, {*stream});
    }
  }
  return ReplyOrDefer(ex, tag, Error(Err::kInvalidMemcpyDirection, "unknown copy kind"));
}

Status Handlers::MemcpyHtoD(Executor& ex, const InFrame& frame, Req req) {
  auto a = req.getMemcpyHtoD();
  uint64_t tag = a.getAsync() ? 0 : frame.header.tag;
  uint64_t size = a.getSize();
  if (a.getHostRegion() != 0) {
    // Zero copy: the source is the client's pinned memory, mapped here and registered.
    if (frame.header.bulk_bytes != 0) return Error(Err::kInvalidValue, "a region copy carries no data");
    auto src = ex.RegionRange(a.getHostRegion(), a.getHostOffset(), size);
    if (!src.ok()) return ReplyOrDefer(ex, tag, src.status());
    auto range = ex.session().CheckRange(a.getDst(), size);
    if (!range.ok()) return ReplyOrDefer(ex, tag, range.status());
    auto stream = ex.ResolveStream(a.getStream(), req.getThread(), req.getDevice());
    if (!stream.ok()) return ReplyOrDefer(ex, tag, stream.status());
    Status st = ex.SetDevice(stream->gpu);
    if (st.ok() && size > 0) st = ex.driver().MemcpyHtoD(a.getDst(), *src, size, stream->stream);
    if (!st.ok() || tag == 0) return ReplyOrDefer(ex, tag, st);
    return ReplyWhenDone(ex, tag, {*stream});
  }
  if (size != frame.header.bulk_bytes)
    return Error(Err::kInvalidValue, "memcpyHtoD of {} bytes carries {} bytes of data", size, frame.header.bulk_bytes);
  Status st;
  auto range = ex.session().CheckRange(a.getDst(), size);
  auto stream = ex.ResolveStream(a.getStream(), req.getThread(), req.getDevice());
  if (!range.ok()) st = range.status();
  else if (!stream.ok()) st = stream.status();
  if (!st.ok()) {
    if (size == 0) return ReplyOrDefer(ex, tag, st);
    ex.AddPending(MakeDrainOp(tag, size, st));
    return Status::Ok();
  }
  if (size == 0) return ReplyOrDefer(ex, tag, Status::Ok());
  auto capturing = ex.Capturing(*stream);
  if (!capturing.ok() || *capturing) {
    // Captured: the bytes sent now are not what a launch copies (the client refreshes the
    // staging before each launch); they are read and dropped.
    Status captured = capturing.ok() ? CaptureHostCopy(ex, *stream, a.getClientAddr(), a.getDst(), size, true) : capturing.status();
    ex.AddPending(MakeDrainOp(tag, size, captured));
    return Status::Ok();
  }
  ex.AddPending(MakeHtoDOp(tag, *stream, DeviceLayout::Linear(a.getDst(), size), DeviceOnly(range->kind)));
  return Status::Ok();
}

Status Handlers::MemcpyDtoH(Executor& ex, uint64_t tag, Req req) {
  auto a = req.getMemcpyDtoH();
  uint64_t size = a.getSize();
  if (a.getHostRegion() != 0 && a.getViaBounce() && ex.session().graphs().active_captures() > 0) {
    // The client's bounce buffer is not the destination: a capture binds the real one.
    auto stream = ex.ResolveStream(a.getStream(), req.getThread(), req.getDevice());
    if (!stream.ok()) return ex.PostReply(tag, stream.status());
    auto capturing = ex.Capturing(*stream);
    if (!capturing.ok()) return ex.PostReply(tag, capturing.status());
    if (*capturing) {
      auto range = ex.session().allocations().CheckRange(a.getSrc(), size);
      if (!range.ok()) return ex.PostReply(tag, range.status());
      return ReplyCaptured(ex, tag, CaptureHostCopy(ex, *stream, a.getClientAddr(), a.getSrc(), size, false));
    }
  }
  if (a.getHostRegion() != 0) {
    // Zero copy into the client's pinned memory: answered (if at all) when the DMA is done.
    if (a.getAsync()) tag = 0;
    auto dst = ex.RegionRange(a.getHostRegion(), a.getHostOffset(), size);
    if (!dst.ok()) return ReplyOrDefer(ex, tag, dst.status());
    auto range = ex.session().CheckRange(a.getSrc(), size);
    if (!range.ok()) return ReplyOrDefer(ex, tag, range.status());
    auto stream = ex.ResolveStream(a.getStream(), req.getThread(), req.getDevice());
    if (!stream.ok()) return ReplyOrDefer(ex, tag, stream.status());
    Status st = ex.SetDevice(stream->gpu);
    if (st.ok() && size > 0) st = ex.driver().MemcpyDtoH(*dst, a.getSrc(), size, stream->stream);
    if (!st.ok() || tag == 0) return ReplyOrDefer(ex, tag, st);
    return ReplyWhenDone(ex, tag, {*stream});
  }
  auto range = ex.session().CheckRange(a.getSrc(), size);
  if (!range.ok()) return ex.PostReply(tag, range.status());
  auto stream = ex.ResolveStream(a.getStream(), req.getThread(), req.getDevice());
  if (!stream.ok()) return ex.PostReply(tag, stream.status());
  auto capturing = ex.Capturing(*stream);
  if (!capturing.ok()) return ex.PostReply(tag, capturing.status());
  // Captured: answered at once without data (a launch's copy lands in the staging, which
  // the client drains after the launch).
  if (*capturing) return ReplyCaptured(ex, tag, CaptureHostCopy(ex, *stream, a.getClientAddr(), a.getSrc(), size, false));
  return StartDtoH(ex, tag, *stream, DeviceLayout::Linear(a.getSrc(), size));
}

Status Handlers::MemcpyDtoD(Executor& ex, uint64_t tag, Req req) {
  auto a = req.getMemcpyDtoD();
  uint64_t size = a.getSize();
  auto dst = ex.session().CheckRange(a.getDst(), size);
  if (!dst.ok()) return ReplyOrDefer(ex, tag, dst.status());
  auto src = ex.session().CheckRange(a.getSrc(), size);
  if (!src.ok()) return ReplyOrDefer(ex, tag, src.status());
  auto stream = ex.ResolveStream(a.getStream(), req.getThread(), req.getDevice());
  if (!stream.ok()) return ReplyOrDefer(ex, tag, stream.status());
  Status st = ex.SetDevice(stream->gpu);
  if (st.ok() && size > 0) st = ex.driver().MemcpyDtoD(a.getDst(), a.getSrc(), size, stream->stream);
  if (!st.ok() || tag == 0) return ReplyOrDefer(ex, tag, st);
  return ReplyWhenDone(ex, tag, {*stream});
}

}  // namespace remora::worker
