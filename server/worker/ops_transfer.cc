// Copies: host to device (the bytes arrive as the request's bulk and are DMA'd chunk by
// chunk as they arrive), device to host (DMA into transport chunks, shipped in order),
// device to device, strided 2D/3D copies and copies between devices. Every device range is
// checked against the session's own allocations first.
#include <cstring>
#include <deque>

#include "remora/base/log.h"
#include "remora/base/util.h"
#include "worker/handlers.h"

namespace remora::worker {
namespace {

constexpr size_t kMaxChunksInFlight = 6;
constexpr uint64_t kBounceLimit = 64 << 10;

// Where the packed bytes of a copy go on the device: `height` rows of `width` bytes per
// slice, `depth` slices; rows `pitch` apart, slices `rows_per_slice * pitch` apart. A plain
// copy is one row of `width` = size bytes.
struct DeviceLayout {
  DevPtr base = 0;
  uint64_t pitch = 0, rows_per_slice = 1, width = 0, height = 1, depth = 1;
  // A CUDA array instead (the driver's CUarray): the copy's origin in it, x in bytes.
  void* array = nullptr;
  uint64_t x0 = 0, y0 = 0, z0 = 0;

  static DeviceLayout Linear(DevPtr p, uint64_t n) { return {p, n, 1, n, 1, 1}; }
  uint64_t total() const { return width * height * depth; }
  DevPtr Row(uint64_t r) const { return base + ((r / height) * rows_per_slice + r % height) * pitch; }
  // The device range the layout touches, for validation.
  uint64_t extent() const { return total() == 0 ? 0 : ((depth - 1) * rows_per_slice + (height - 1)) * pitch + width; }
  // The device side of `rows` rows from packed row `r`, starting `col` bytes into it.
  CopySide Device(uint64_t r, uint64_t col, uint64_t run_pitch, uint64_t rows) const {
    if (array == nullptr) return CopySide{false, Row(r) + col, run_pitch, rows};
    CopySide s;
    s.array = array;
    s.x = x0 + col;
    s.y = y0 + r % height;
    s.z = z0 + r / height;
    return s;
  }
  // The whole layout as one side of a 3D copy.
  CopySide Whole() const {
    if (array == nullptr) return CopySide{false, base, pitch, rows_per_slice};
    return Device(0, 0, 0, 0);
  }
  bool Linear() const { return array == nullptr && height == 1 && depth == 1; }

  // Calls copy(device side, host side, width, rows) for the packed bytes [off, off + n)
  // living at `host`: a partial first row, whole rows per slice, a partial last row.
  template <typename Copy>
  Status ForEachRun(uint64_t off, uint64_t n, std::byte* host, Copy&& copy) const {
    uint64_t end = off + n;
    while (off < end) {
      uint64_t row = off / width, col = off % width;
      if (col != 0 || end - off < width) {
        uint64_t len = std::min(width - col, end - off);
        RETURN_IF_ERROR(copy(Device(row, col, len, 1), CopySide{true, reinterpret_cast<uint64_t>(host), len, 1}, len, 1));
        off += len;
        host += len;
        continue;
      }
      uint64_t rows = std::min((end - off) / width, height - row % height);  // stay in the slice
      RETURN_IF_ERROR(copy(Device(row, 0, pitch, rows), CopySide{true, reinterpret_cast<uint64_t>(host), width, rows}, width, rows));
      off += rows * width;
      host += rows * width;
    }
    return Status::Ok();
  }
};

// Consumes and discards the bulk of a request that was refused, then answers it: the
// transport must stay in step with the client.
class DrainOp final : public PendingOp {
 public:
  DrainOp(uint64_t tag, uint64_t total, Status error) : tag_(tag), total_(total), error_(std::move(error)) {}
  bool HoldsQueue() const override { return true; }
  bool HoldsTransport() const override { return true; }
  Result<bool> Poll(Executor& ex) override {
    while (seen_ < total_) {
      ASSIGN_OR_RETURN(std::optional<BulkChunk> c, ex.PollBulk());
      if (!c) return false;
      seen_ += c->size;
      ex.ReleaseBulk(*c);
    }
    RETURN_IF_ERROR(Handlers::ReplyOrDefer(ex, tag_, error_));
    return true;
  }

 private:
  uint64_t tag_, total_, seen_ = 0;
  Status error_;
};

// Waits for a small copy just issued on a stream that was idle by polling the stream: a few
// microseconds of DMA, where recording an event and polling it from the executor's loop
// costs more (and the driver's blocking wait measured slower than this loop). Gives up with
// kNotReady after kSmallCopySpinNs: the stream was idle as far as StreamQuery tells, but a
// legacy-stream copy may still wait for other blocking streams' work.
constexpr uint64_t kSmallCopySpinNs = 200'000;
Status SpinSmallCopy(Executor& ex, DStream s) {
  uint64_t until = MonotonicNanos() + kSmallCopySpinNs;
  for (;;) {
    Status st = ex.driver().StreamQuery(s);
    if (st.code() != Err::kNotReady || MonotonicNanos() > until) return st;
  }
}

// Host-to-device copy: each chunk is DMA'd as it arrives; chunk memory is returned to the
// transport when its DMA completes. Small asynchronous copies are bounced through a pinned
// buffer so the transport (and the request queue) is free at once. While a host function
// waits on the client, the DMA may wait on it too: the copy is then spilled into pinned
// memory of its own, so the transport keeps moving (the client's callbackDone is behind it).
class HtoDOp final : public PendingOp {
 public:
  HtoDOp(uint64_t tag, Executor::Stream stream, DeviceLayout dst)
      : tag_(tag), stream_(stream), dst_(dst), total_(dst.total()) {}

  bool HoldsQueue() const override { return HoldsTransport(); }
  bool HoldsTransport() const override { return received_ < total_ || holds_transport_chunks_ > 0; }
  void Abandon(Executor& ex) override {
    for (auto& it : inflight_)
      if (it.event != nullptr) ex.ReleasePoolEvent(stream_.gpu, it.event);
    if (spill_ != nullptr) {
      // The session's host functions were released: the stream drains, then the DMA source goes.
      if (ex.SetDevice(stream_.gpu).ok()) (void)ex.driver().StreamSynchronize(stream_.stream);
      ex.driver().HostFree(spill_);
      spill_ = nullptr;
    }
  }

  // The rest of the call goes on as a drain: the DMAs issued so far finish as before (never
  // waited for here: one may wait on a host function that waits on the client), the bytes
  // still to come are read and dropped, and the call answers its first error.
  std::unique_ptr<PendingOp> Recover(Executor& ex, const Status& error) override {
    (void)ex;
    if (draining_) return nullptr;
    auto rest = std::make_unique<HtoDOp>(std::move(*this));
    rest->draining_ = true;
    if (rest->error_.ok()) rest->error_ = error;
    return rest;
  }

  Result<bool> Poll(Executor& ex) override {
    if (!started_) {
      started_ = true;
      if (total_ > kBounceLimit && total_ <= kMaxSpill && ex.HostCallbacksOutstanding()) {
        auto p = ex.driver().HostAlloc(total_);
        if (p.ok()) spill_ = static_cast<std::byte*>(*p);
      }
    }
    while (received_ < total_ && (spill_ != nullptr || inflight_.size() < kMaxChunksInFlight)) {
      ASSIGN_OR_RETURN(std::optional<BulkChunk> c, ex.PollBulk());
      if (!c) break;
      received_ += c->size;
      if (draining_) {
        ex.ReleaseBulk(*c);
        continue;
      }
      Item item{*c, nullptr, nullptr, false};
      const std::byte* src = c->data;
      if (spill_ != nullptr) {
        std::memcpy(spill_ + c->offset, c->data, c->size);
        ex.ReleaseBulk(*c);
        item.spilled = true;
        src = spill_ + c->offset;
      } else if (total_ <= kBounceLimit) {
        auto b = ex.AcquireBounce();
        if (b.ok()) {
          std::memcpy(*b, c->data, c->size);
          ex.ReleaseBulk(*c);
          item.bounce = *b;
          src = *b;
        }
      }
      if (item.bounce == nullptr && !item.spilled) holds_transport_chunks_++;
      Status st = ex.SetDevice(stream_.gpu);
      // A small synchronous copy, whole in this chunk, onto an idle stream: waited for here
      // (SpinSmallCopy) instead of through an event.
      bool small = st.ok() && error_.ok() && tag_ != 0 && item.bounce != nullptr && c->size == total_ &&
                   dst_.Linear() && ex.driver().StreamQuery(stream_.stream).ok();
      if (st.ok() && error_.ok()) st = Issue(ex, c->offset, c->size, const_cast<std::byte*>(src));
      bool waited = false;  // else still running: an event, as for any copy
      if (small && st.ok()) {
        Status done = SpinSmallCopy(ex, stream_.stream);
        waited = done.code() != Err::kNotReady;
        if (waited && !done.ok()) st = done;
      }
      if (st.ok() && error_.ok() && !waited) {
        auto e = ex.RecordPoolEvent(stream_);
        if (e.ok()) item.event = *e;
        else st = e.status();
      }
      if (!st.ok() && error_.ok()) error_ = st;
      inflight_.push_back(item);
    }
    while (!inflight_.empty()) {
      Item& it = inflight_.front();
      if (it.event != nullptr) {
        Status st = ex.driver().EventQuery(it.event);
        if (st.code() == Err::kNotReady) break;
        if (!st.ok() && error_.ok()) error_ = st;
        ex.ReleasePoolEvent(stream_.gpu, it.event);
      }
      if (it.bounce != nullptr) {
        ex.ReleaseBounce(it.bounce);
      } else if (!it.spilled) {
        ex.ReleaseBulk(it.chunk);
        holds_transport_chunks_--;
      }
      inflight_.pop_front();
    }
    if (received_ < total_ || !inflight_.empty()) return false;
    if (spill_ != nullptr) ex.driver().HostFree(spill_);
    spill_ = nullptr;
    RETURN_IF_ERROR(Handlers::ReplyOrDefer(ex, tag_, error_));
    return true;
  }

 private:
  static constexpr uint64_t kMaxSpill = 1ull << 30;  // larger copies keep the transport's memory

  Status Issue(Executor& ex, uint64_t off, uint64_t n, std::byte* src) {
    if (dst_.Linear()) return ex.driver().MemcpyHtoD(dst_.base + off, src, n, stream_.stream);
    return dst_.ForEachRun(off, n, src, [&](const CopySide& dev, const CopySide& host, uint64_t w, uint64_t rows) {
      return ex.driver().Copy3D(dev, host, w, rows, 1, stream_.stream);
    });
  }
  struct Item {
    BulkChunk chunk;
    DEvent event;
    std::byte* bounce;
    bool spilled;
  };
  uint64_t tag_;
  Executor::Stream stream_;
  DeviceLayout dst_;
  uint64_t total_, received_ = 0;
  int holds_transport_chunks_ = 0;
  bool started_ = false;
  bool draining_ = false;       // failed part-way: the rest of the bulk is dropped (Recover)
  std::byte* spill_ = nullptr;  // pinned, owned
  std::deque<Item> inflight_;
  Status error_;
};

// Device-to-host copy. First it waits until the stream reaches the copy (an event: work
// queued before it - a host function waiting for the client, say - must not be stuck behind
// a half-sent reply); then it posts the reply and DMAs into transport chunks, shipped in
// order as each completes. A failure after the reply went out ships zeros for the rest and
// surfaces as the session's pending error at the next synchronising call.
class DtoHOp final : public PendingOp {
 public:
  // `shipped`: bytes of the reply's bulk already committed (the reply then went out).
  DtoHOp(uint64_t tag, Executor::Stream stream, DeviceLayout src, DEvent gate, uint64_t shipped = 0)
      : tag_(tag), stream_(stream), src_(src), total_(src.total()), acquired_(shipped), committed_(shipped), gate_(gate) {}
  bool HoldsQueue() const override { return true; }
  // A bounce buffer a DMA behind the gate still writes: returned once the gate completes.
  void ReleaseAtGate(std::byte* bounce) { gate_bounce_ = bounce; }
  void Abandon(Executor& ex) override {
    if (gate_ != nullptr) ex.ReleasePoolEvent(stream_.gpu, gate_);
    if (gate_bounce_ != nullptr) {
      // The DMA into it may still run: the stream drains before the buffer goes back.
      if (ex.SetDevice(stream_.gpu).ok()) (void)ex.driver().StreamSynchronize(stream_.stream);
      ex.ReleaseBounce(gate_bounce_);
    }
    for (auto& it : inflight_)
      if (it.event != nullptr) ex.ReleasePoolEvent(stream_.gpu, it.event);
  }

  Result<bool> Poll(Executor& ex) override {
    if (gate_ != nullptr) {
      Status st = ex.driver().EventQuery(gate_);
      if (st.code() == Err::kNotReady) return false;
      ex.ReleasePoolEvent(stream_.gpu, gate_);
      gate_ = nullptr;
      if (gate_bounce_ != nullptr) ex.ReleaseBounce(gate_bounce_);
      gate_bounce_ = nullptr;
      // A context broken by an earlier fault answers with its error, before any data.
      if (!st.ok()) {
        RETURN_IF_ERROR(ex.PostReply(tag_, st));
        return true;
      }
      RETURN_IF_ERROR(ex.PostReply(tag_, Status::Ok(), [](wire::Reply::Builder&) {}, total_));
      ex.BeginBulkReply();
    }
    while (acquired_ < total_ && inflight_.size() < kMaxChunksInFlight) {
      ASSIGN_OR_RETURN(std::optional<BulkChunk> c, ex.conn().AcquireBulkChunk(total_ - acquired_));
      if (!c) break;
      acquired_ += c->size;
      Item item{*c, nullptr};
      Status st = error_.ok() ? ex.SetDevice(stream_.gpu) : error_;
      if (st.ok()) st = Issue(ex, c->offset, c->size, c->data);
      if (st.ok()) {
        auto e = ex.RecordPoolEvent(stream_);
        if (e.ok()) item.event = *e;
        else st = e.status();
      }
      if (!st.ok()) {
        Fail(ex, st);
        std::memset(c->data, 0, c->size);
      }
      inflight_.push_back(item);
    }
    while (!inflight_.empty()) {
      Item& it = inflight_.front();
      if (it.event != nullptr) {
        Status st = ex.driver().EventQuery(it.event);
        if (st.code() == Err::kNotReady) break;
        ex.ReleasePoolEvent(stream_.gpu, it.event);
        if (!st.ok()) {
          Fail(ex, st);
          std::memset(it.chunk.data, 0, it.chunk.size);
        }
      }
      RETURN_IF_ERROR(ex.conn().CommitBulkChunk(it.chunk, it.chunk.size));
      committed_ += it.chunk.size;
      inflight_.pop_front();
    }
    if (committed_ < total_) return false;
    RETURN_IF_ERROR(ex.EndBulkReply());
    return true;
  }

 private:
  Status Issue(Executor& ex, uint64_t off, uint64_t n, std::byte* dst) {
    if (src_.Linear()) return ex.driver().MemcpyDtoH(dst, src_.base + off, n, stream_.stream);
    return src_.ForEachRun(off, n, dst, [&](const CopySide& dev, const CopySide& host, uint64_t w, uint64_t rows) {
      return ex.driver().Copy3D(host, dev, w, rows, 1, stream_.stream);
    });
  }
  void Fail(Executor& ex, const Status& st) {
    if (!error_.ok()) return;
    error_ = st;
    ex.DeferError(st);
  }
  struct Item {
    BulkChunk chunk;
    DEvent event;
  };
  uint64_t tag_;
  Executor::Stream stream_;
  DeviceLayout src_;
  uint64_t total_, acquired_, committed_;
  DEvent gate_;
  std::byte* gate_bounce_ = nullptr;
  std::deque<Item> inflight_;
  Status error_;
};

constexpr uint64_t kSmallCopy = 64 << 10;

// Answers a device-to-host copy that went into a graph: no data, value 1 says so.
Status ReplyCaptured(Executor& ex, uint64_t tag, const Status& st) {
  if (!st.ok() || tag == 0) return Handlers::ReplyOrDefer(ex, tag, st);
  return ex.PostReply(tag, st, [](wire::Reply::Builder& r) { r.setValue(1); });
}

// Starts a device-to-host copy answered with the bytes as the reply's bulk. On an idle
// stream a small copy is done at once (one synchronous DMA beats an event round trip);
// otherwise a DtoHOp waits for the stream to reach the copy.
Status StartDtoH(Executor& ex, uint64_t tag, const Executor::Stream& stream, const DeviceLayout& src) {
  Status st = ex.SetDevice(stream.gpu);
  if (!st.ok()) return ex.PostReply(tag, st);
  if (src.total() == 0) return ex.PostReply(tag, Status::Ok());
  Status idle = ex.driver().StreamQuery(stream.stream);
  if (!idle.ok() && idle.code() != Err::kNotReady) return ex.PostReply(tag, idle);  // a broken context
  if (idle.ok() && src.total() <= kSmallCopy && src.Linear()) {
    auto bounce = ex.AcquireBounce();
    if (bounce.ok()) {
      st = ex.driver().MemcpyDtoH(*bounce, src.base, src.total(), stream.stream);
      if (st.ok()) st = SpinSmallCopy(ex, stream.stream);
      if (st.code() == Err::kNotReady) {
        // Still running after the spin (a legacy-stream copy behind another stream's work):
        // the op below waits for the stream through an event and copies again, the loop goes
        // on; the bounce is returned once that DMA is done.
        auto gate = ex.RecordPoolEvent(stream);
        if (!gate.ok()) st = ex.driver().StreamSynchronize(stream.stream);
        else {
          auto op = std::make_unique<DtoHOp>(tag, stream, src, *gate);
          op->ReleaseAtGate(*bounce);
          ex.AddPending(std::move(op));
          return Status::Ok();
        }
      }
      if (!st.ok()) {
        ex.ReleaseBounce(*bounce);
        return ex.PostReply(tag, st);
      }
      // Done, and its outcome known before the reply goes out.
      st = ex.PostReply(tag, Status::Ok(), [](wire::Reply::Builder&) {}, src.total());
      auto c = st.ok() ? ex.conn().AcquireBulkChunk(src.total()) : Result<std::optional<BulkChunk>>(st);
      if (c.ok() && *c) {
        std::memcpy((*c)->data, *bounce, (*c)->size);
        ex.ReleaseBounce(*bounce);
        RETURN_IF_ERROR(ex.conn().CommitBulkChunk(**c, (*c)->size));
        if ((*c)->size == src.total()) return Status::Ok();
        // A transport whose chunk is smaller than this copy: the op ships the rest.
        ex.BeginBulkReply();
        ex.AddPending(std::make_unique<DtoHOp>(tag, stream, src, nullptr, (*c)->size));
        return Status::Ok();
      }
      ex.ReleaseBounce(*bounce);
      RETURN_IF_ERROR(c.status());
      // No chunk free right now (rare): the op below ships it, as any copy.
      ex.BeginBulkReply();
      ex.AddPending(std::make_unique<DtoHOp>(tag, stream, src, nullptr));
      return Status::Ok();
    }
  }
  auto gate = ex.RecordPoolEvent(stream);
  if (!gate.ok()) return ex.PostReply(tag, gate.status());
  ex.AddPending(std::make_unique<DtoHOp>(tag, stream, src, *gate));
  return Status::Ok();
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
        ex.AddPending(std::make_unique<DrainOp>(tag, frame.header.bulk_bytes, st));
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
        ex.AddPending(std::make_unique<DrainOp>(tag, frame.header.bulk_bytes, st));
        return Status::Ok();
      }
      if (dst->total() == 0) return ReplyOrDefer(ex, tag, Status::Ok());
      ex.AddPending(std::make_unique<HtoDOp>(tag, *stream, *dst));
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

Status Handlers::MemcpyPeer(Executor& ex, uint64_t tag, Req req) {
  auto a = req.getMemcpyPeer();
  auto dst_gpu = ex.GpuOf(a.getDstDevice());
  if (!dst_gpu.ok()) return ReplyOrDefer(ex, tag, dst_gpu.status());
  auto src_gpu = ex.GpuOf(a.getSrcDevice());
  if (!src_gpu.ok()) return ReplyOrDefer(ex, tag, src_gpu.status());
  auto dst = ex.session().CheckRange(a.getDst(), a.getSize());
  if (!dst.ok()) return ReplyOrDefer(ex, tag, dst.status());
  auto src = ex.session().CheckRange(a.getSrc(), a.getSize());
  if (!src.ok()) return ReplyOrDefer(ex, tag, src.status());
  if (dst->device != *dst_gpu || src->device != *src_gpu)
    return ReplyOrDefer(ex, tag, Error(Err::kInvalidValue, "a pointer does not belong to the device named with it"));
  auto stream = ex.ResolveStream(a.getStream(), req.getThread(), req.getDevice());
  if (!stream.ok()) return ReplyOrDefer(ex, tag, stream.status());
  Status st = ex.SetDevice(stream->gpu);
  if (st.ok() && a.getSize() > 0)
    st = ex.driver().MemcpyPeer(a.getDst(), *dst_gpu, a.getSrc(), *src_gpu, a.getSize(), stream->stream);
  if (!st.ok() || tag == 0) return ReplyOrDefer(ex, tag, st);
  return ReplyWhenDone(ex, tag, {*stream});
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
    ex.AddPending(std::make_unique<DrainOp>(tag, size, st));
    return Status::Ok();
  }
  if (size == 0) return ReplyOrDefer(ex, tag, Status::Ok());
  auto capturing = ex.Capturing(*stream);
  if (!capturing.ok() || *capturing) {
    // Captured: the bytes sent now are not what a launch copies (the client refreshes the
    // staging before each launch); they are read and dropped.
    Status captured = capturing.ok() ? CaptureHostCopy(ex, *stream, a.getClientAddr(), a.getDst(), size, true) : capturing.status();
    ex.AddPending(std::make_unique<DrainOp>(tag, size, captured));
    return Status::Ok();
  }
  ex.AddPending(std::make_unique<HtoDOp>(tag, *stream, DeviceLayout::Linear(a.getDst(), size)));
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
