// The pending operations that move a copy's bytes (pending_transfer.h): host to device (the
// bytes arrive as the request's bulk and are DMA'd chunk by chunk as they arrive), device
// to host (DMA into transport chunks, shipped in order), and the drain of refused bulk.
#include "worker/ops/pending_transfer.h"

#include <cstring>
#include <deque>

#include "remora/base/util.h"
#include "worker/ops/handlers.h"
#include "worker/ipc/ipc_state.h"

namespace remora::worker {
namespace {

constexpr size_t kMaxChunksInFlight = 6;
constexpr uint64_t kBounceLimit = 64 << 10;
constexpr uint64_t kSmallCopy = 64 << 10;

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
    RETURN_IF_ERROR(ReplyOrDefer(ex, tag_, error_));
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
  HtoDOp(uint64_t tag, Executor::Stream stream, DeviceLayout dst, bool device_only)
      : tag_(tag), stream_(stream), dst_(dst), total_(dst.total()), device_only_(device_only) {}

  // Answered before its DMA finished (AnswerEarly): later requests wait until it has.
  bool HoldsQueue() const override { return HoldsTransport() || (replied_ && !inflight_.empty()); }
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
        if (device_only_ && AnswerEarly(ex)) {
          RETURN_IF_ERROR(ex.PostReply(tag_, Status::Ok()));
          replied_ = true;
        }
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
    // Spilled because a host function was outstanding: it may still be (JAX over tcp stopped
    // in this cuMemFreeHost, which waits for the whole device).
    if (spill_ != nullptr) ex.FreeHostWhenIdle(spill_);
    spill_ = nullptr;
    if (replied_) ex.DeferError(error_);  // the DMA failed after its OK went out: a device fault
    else RETURN_IF_ERROR(ReplyOrDefer(ex, tag_, error_));
    return true;
  }

 private:
  static constexpr uint64_t kMaxSpill = 1ull << 30;  // larger copies keep the transport's memory

  // A small synchronous copy whose bytes are all in the worker's own bounce buffer, issued
  // onto an idle stream: its OK goes out before the DMA is done, which then runs while the
  // reply crosses the network (a 4 KiB copy's DMA is most of a native call). Nothing can
  // tell: the client's memory is no longer read, and this op holds the session's later
  // requests until the DMA is done (HoldsQueue), so every later call - a kernel, a copy back,
  // a synchronisation - finds the bytes in place, as after a native synchronous copy. Only
  // a device fault during the DMA is seen later: as the session's pending error at its next
  // call (the context is then broken, so no call can read what the copy left). Not done
  // where anything but this session's calls might look first: host memory the device maps
  // (device_only_), memory shared through IPC or exported physical memory and pools; nor
  // while a host function waits on the client (the DMA may wait on it, and the held queue
  // would then hold the client's later calls behind it).
  static bool AnswerEarly(Executor& ex) { return !ex.HostCallbacksOutstanding() && !ex.ipc().SharesMemory(); }

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
  bool device_only_;  // no host reads `dst_` directly (MakeHtoDOp)
  int holds_transport_chunks_ = 0;
  bool started_ = false;
  bool draining_ = false;       // failed part-way: the rest of the bulk is dropped (Recover)
  bool replied_ = false;        // its OK went out before the DMA finished (AnswerEarly)
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
  // Its DMA into a bounce buffer already queued in stream order (ShipFrom), only its reply
  // is waited for: only requests expecting a reply wait behind it. A graph's host node ahead
  // in the stream may wait on the client, whose posted requests (the next launch's inputs)
  // must then still be read (simpleCudaGraphs over tcp). Else the DMA is issued once the
  // stream gets there, and every later request waits.
  bool HoldsQueue() const override { return filled_ == nullptr; }
  bool HoldsReplies() const override { return true; }
  // A bounce buffer the whole copy was DMA'd into ahead of the gate, in stream order: its
  // bytes are shipped once the gate completes (one wait for the GPU, not two), then returned.
  void ShipFrom(std::byte* filled) { filled_ = filled; }
  void Abandon(Executor& ex) override {
    if (gate_ != nullptr) ex.ReleasePoolEvent(stream_.gpu, gate_);
    if (filled_ != nullptr && gate_ != nullptr) {
      // The DMA into it may still run: the stream drains before the buffer goes back.
      if (ex.SetDevice(stream_.gpu).ok()) (void)ex.driver().StreamSynchronize(stream_.stream);
    }
    if (filled_ != nullptr) ex.ReleaseBounce(filled_);
    for (auto& it : inflight_)
      if (it.event != nullptr) ex.ReleasePoolEvent(stream_.gpu, it.event);
  }

  Result<bool> Poll(Executor& ex) override {
    if (gate_ != nullptr) {
      Status st = ex.driver().EventQuery(gate_);
      if (st.code() == Err::kNotReady) return false;
      ex.ReleasePoolEvent(stream_.gpu, gate_);
      gate_ = nullptr;
      // A context broken by an earlier fault answers with its error, before any data.
      if (!st.ok()) {
        if (filled_ != nullptr) ex.ReleaseBounce(filled_);
        filled_ = nullptr;
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
      if (filled_ != nullptr) {  // already copied: no DMA, nothing to wait for
        std::memcpy(c->data, filled_ + c->offset, c->size);
        inflight_.push_back(item);
        continue;
      }
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
    if (filled_ != nullptr) ex.ReleaseBounce(filled_);
    filled_ = nullptr;
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
  std::byte* filled_ = nullptr;  // ShipFrom
  std::deque<Item> inflight_;
  Status error_;
};

}  // namespace

std::unique_ptr<PendingOp> MakeDrainOp(uint64_t tag, uint64_t total, Status error) {
  return std::make_unique<DrainOp>(tag, total, std::move(error));
}

std::unique_ptr<PendingOp> MakeHtoDOp(uint64_t tag, Executor::Stream stream, DeviceLayout dst, bool device_only) {
  return std::make_unique<HtoDOp>(tag, stream, dst, device_only);
}

// On an idle stream a small copy is done at once (one synchronous DMA beats an event round
// trip); otherwise a DtoHOp waits for the stream to reach the copy.
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
        // the op below waits for the stream through an event and ships what the DMA put in
        // the bounce, the loop goes on.
        auto gate = ex.RecordPoolEvent(stream);
        if (!gate.ok()) st = ex.driver().StreamSynchronize(stream.stream);
        else {
          auto op = std::make_unique<DtoHOp>(tag, stream, src, *gate);
          op->ShipFrom(*bounce);
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
  if (!idle.ok() && src.total() <= kSmallCopy && src.Linear()) {
    // Behind running work (PyTorch's .item(): a reduction, then its result): the DMA goes
    // into a bounce buffer now, in stream order, and the bytes ship when the stream is past it
    // - one wait for the GPU, where waiting for the stream and then copying is two.
    auto bounce = ex.AcquireBounce();
    if (bounce.ok()) {
      st = ex.driver().MemcpyDtoH(*bounce, src.base, src.total(), stream.stream);
      auto gate = st.ok() ? ex.RecordPoolEvent(stream) : Result<DEvent>(st);
      if (gate.ok()) {
        auto op = std::make_unique<DtoHOp>(tag, stream, src, *gate);
        op->ShipFrom(*bounce);
        ex.AddPending(std::move(op));
        return Status::Ok();
      }
      // Not queued after all: the stream drains before the buffer goes back (a DMA may be in it).
      if (st.ok()) (void)ex.driver().StreamSynchronize(stream.stream);
      ex.ReleaseBounce(*bounce);
      return ex.PostReply(tag, gate.status());
    }
  }
  auto gate = ex.RecordPoolEvent(stream);
  if (!gate.ok()) return ex.PostReply(tag, gate.status());
  ex.AddPending(std::make_unique<DtoHOp>(tag, stream, src, *gate));
  return Status::Ok();
}

}  // namespace remora::worker
