// Device memory: allocation (charged to the tenant's ledger before the driver call), free,
// copies in every direction and memset. Every pointer is checked against the session's own
// allocation table first: memory of another session is never touched.
#include <cstring>
#include <deque>

#include "remora/base/log.h"
#include "remora/base/util.h"
#include "worker/handlers.h"

namespace remora::worker {
namespace {

constexpr size_t kMaxChunksInFlight = 4;
constexpr uint64_t kBounceLimit = 64 << 10;

Status ReplyOrDefer(Executor& ex, uint64_t tag, const Status& st) {
  if (tag != 0) return ex.PostReply(tag, st);
  ex.DeferError(st);
  return Status::Ok();
}

// Consumes and discards the bulk of a request that was refused, then answers it: the
// transport must stay in step with the client.
class DrainOp final : public PendingOp {
 public:
  DrainOp(uint64_t tag, uint64_t total, Status error) : tag_(tag), total_(total), error_(std::move(error)) {}
  bool HoldsQueue() const override { return true; }
  Result<bool> Poll(Executor& ex) override {
    while (seen_ < total_) {
      ASSIGN_OR_RETURN(std::optional<BulkChunk> c, ex.conn().PollBulkChunk());
      if (!c) return false;
      seen_ += c->size;
      ex.conn().ReleaseBulkChunk(*c);
    }
    RETURN_IF_ERROR(ReplyOrDefer(ex, tag_, error_));
    return true;
  }

 private:
  uint64_t tag_, total_, seen_ = 0;
  Status error_;
};

// Host-to-device copy: each chunk is DMA'd as it arrives; chunk memory is returned to the
// transport when its DMA completes. Small asynchronous copies are bounced through a pinned
// buffer so the transport (and the request queue) is free at once.
class HtoDOp final : public PendingOp {
 public:
  HtoDOp(uint64_t tag, Executor::Stream stream, DevPtr dst, uint64_t total)
      : tag_(tag), stream_(stream), dst_(dst), total_(total) {}

  bool HoldsQueue() const override { return received_ < total_ || holds_transport_chunks_ > 0; }

  Result<bool> Poll(Executor& ex) override {
    while (received_ < total_ && inflight_.size() < kMaxChunksInFlight) {
      ASSIGN_OR_RETURN(std::optional<BulkChunk> c, ex.conn().PollBulkChunk());
      if (!c) break;
      received_ += c->size;
      Item item{*c, nullptr, nullptr};
      const std::byte* src = c->data;
      if (total_ <= kBounceLimit) {
        auto b = ex.AcquireBounce();
        if (b.ok()) {
          std::memcpy(*b, c->data, c->size);
          ex.conn().ReleaseBulkChunk(*c);
          item.bounce = *b;
          src = *b;
        }
      }
      if (item.bounce == nullptr) holds_transport_chunks_++;
      Status st = ex.SetDevice(stream_.gpu);
      if (st.ok() && error_.ok()) st = ex.driver().MemcpyHtoD(dst_ + c->offset, src, c->size, stream_.stream);
      if (st.ok() && error_.ok()) {
        auto e = ex.AcquirePoolEvent(stream_.gpu);
        if (e.ok()) {
          st = ex.driver().EventRecord(*e, stream_.stream);
          if (st.ok()) item.event = *e;
          else ex.ReleasePoolEvent(stream_.gpu, *e);
        } else {
          st = e.status();
        }
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
      } else {
        ex.conn().ReleaseBulkChunk(it.chunk);
        holds_transport_chunks_--;
      }
      inflight_.pop_front();
    }
    if (received_ < total_ || !inflight_.empty()) return false;
    RETURN_IF_ERROR(ReplyOrDefer(ex, tag_, error_));
    return true;
  }

 private:
  struct Item {
    BulkChunk chunk;
    DEvent event;
    std::byte* bounce;
  };
  uint64_t tag_;
  Executor::Stream stream_;
  DevPtr dst_;
  uint64_t total_, received_ = 0;
  int holds_transport_chunks_ = 0;
  std::deque<Item> inflight_;
  Status error_;
};

// Device-to-host copy: DMA into transport chunks, shipped in order as each completes. The
// reply header went out first; a failure after that ships zeros for the rest and surfaces
// as the session's pending error at the next synchronising call.
class DtoHOp final : public PendingOp {
 public:
  DtoHOp(Executor::Stream stream, DevPtr src, uint64_t total) : stream_(stream), src_(src), total_(total) {}
  bool HoldsQueue() const override { return true; }

  Result<bool> Poll(Executor& ex) override {
    while (acquired_ < total_ && inflight_.size() < kMaxChunksInFlight) {
      ASSIGN_OR_RETURN(std::optional<BulkChunk> c, ex.conn().AcquireBulkChunk(total_ - acquired_));
      if (!c) break;
      acquired_ += c->size;
      Item item{*c, nullptr};
      Status st = error_.ok() ? ex.SetDevice(stream_.gpu) : error_;
      if (st.ok()) st = ex.driver().MemcpyDtoH(c->data, src_ + c->offset, c->size, stream_.stream);
      if (st.ok()) {
        auto e = ex.AcquirePoolEvent(stream_.gpu);
        if (e.ok()) {
          st = ex.driver().EventRecord(*e, stream_.stream);
          if (st.ok()) item.event = *e;
          else ex.ReleasePoolEvent(stream_.gpu, *e);
        } else {
          st = e.status();
        }
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
  void Fail(Executor& ex, const Status& st) {
    if (!error_.ok()) return;
    error_ = st;
    ex.DeferError(st);
  }
  struct Item {
    BulkChunk chunk;
    DEvent event;
  };
  Executor::Stream stream_;
  DevPtr src_;
  uint64_t total_, acquired_ = 0, committed_ = 0;
  std::deque<Item> inflight_;
  Status error_;
};

// cudaFree synchronises the device; the free happens once the work issued before it is done.
class FreeOp final : public PendingOp {
 public:
  FreeOp(uint64_t tag, Allocation a, std::vector<std::pair<int, DEvent>> events)
      : tag_(tag), alloc_(a), events_(std::move(events)) {}
  Result<bool> Poll(Executor& ex) override {
    while (!events_.empty()) {
      auto [gpu, e] = events_.back();
      Status st = ex.driver().EventQuery(e);
      if (st.code() == Err::kNotReady) return false;
      ex.ReleasePoolEvent(gpu, e);
      events_.pop_back();
    }
    Status st = ex.SetDevice(alloc_.device);
    if (st.ok()) st = ex.driver().MemFree(alloc_.base);
    ex.ReleaseCharge(alloc_.device, alloc_.reserved);
    RETURN_IF_ERROR(ex.PostReply(tag_, st));
    return true;
  }

 private:
  uint64_t tag_;
  Allocation alloc_;
  std::vector<std::pair<int, DEvent>> events_;
};

}  // namespace

Status Handlers::MemAlloc(Executor& ex, uint64_t tag, Req req) {
  uint64_t size = req.getMemAlloc().getSize();
  auto gpu = ex.GpuOf(req.getDevice());
  if (!gpu.ok()) return ex.PostReply(tag, gpu.status());
  if (size == 0) return ex.PostReply(tag, Status::Ok(), [](wire::Reply::Builder& r) { r.setPointer(0); });
  // Charge first: the ledger stays exact even when several workers allocate at once.
  if (ex.ledger() != nullptr) {
    Status q = ex.ledger()->Reserve(ex.ledger_slot(), static_cast<uint32_t>(*gpu), size);
    if (!q.ok()) {
      LOG_INFO("refused {} on GPU {}: {}", FormatSize(size), *gpu, q.message());
      return ex.PostReply(tag, q);
    }
  }
  Status st = ex.SetDevice(*gpu);
  Result<DevPtr> p = st.ok() ? ex.driver().MemAlloc(size) : Result<DevPtr>(st);
  if (!p.ok()) {
    ex.ReleaseCharge(*gpu, size);
    return ex.PostReply(tag, p.status());
  }
  Allocation a;
  a.base = *p;
  a.size = size;
  a.device = *gpu;
  a.kind = AllocKind::kDevice;
  a.reserved = size;
  st = ex.allocations().Insert(a);
  if (!st.ok()) {  // the driver handed out an address we already track: never expected
    (void)ex.driver().MemFree(*p);
    ex.ReleaseCharge(*gpu, size);
    return ex.PostReply(tag, st);
  }
  DevPtr ptr = *p;
  return ex.PostReply(tag, Status::Ok(), [&](wire::Reply::Builder& r) { r.setPointer(ptr); });
}

Status Handlers::MemFree(Executor& ex, uint64_t tag, Req req) {
  uint64_t ptr = req.getMemFree().getPtr();
  if (ptr == 0) return ex.PostReply(tag, Status::Ok());
  auto a = ex.allocations().Erase(ptr);
  if (!a.ok()) return ex.PostReply(tag, a.status());
  std::vector<std::pair<int, DEvent>> events;
  for (const Executor::Stream& s : StreamsOf(ex, a->device)) {
    if (!ex.SetDevice(s.gpu).ok()) continue;
    auto e = ex.AcquirePoolEvent(s.gpu);
    if (!e.ok()) continue;
    if (ex.driver().EventRecord(*e, s.stream).ok()) events.emplace_back(s.gpu, *e);
    else ex.ReleasePoolEvent(s.gpu, *e);
  }
  ex.AddPending(std::make_unique<FreeOp>(tag, *a, std::move(events)));
  return Status::Ok();
}

Status Handlers::MemcpyHtoD(Executor& ex, const InFrame& frame, Req req) {
  auto a = req.getMemcpyHtoD();
  uint64_t tag = a.getAsync() ? 0 : frame.header.tag;
  uint64_t size = a.getSize();
  if (size != frame.header.bulk_bytes)
    return Error(Err::kInvalidValue, "memcpyHtoD of {} bytes carries {} bytes of data", size, frame.header.bulk_bytes);
  Status st;
  auto range = ex.allocations().CheckRange(a.getDst(), size);
  auto stream = ex.ResolveStream(a.getStream(), req.getThread(), req.getDevice());
  if (!range.ok()) st = range.status();
  else if (!stream.ok()) st = stream.status();
  if (!st.ok()) {
    if (size == 0) return ReplyOrDefer(ex, tag, st);
    ex.AddPending(std::make_unique<DrainOp>(tag, size, st));
    return Status::Ok();
  }
  if (size == 0) return ReplyOrDefer(ex, tag, Status::Ok());
  ex.AddPending(std::make_unique<HtoDOp>(tag, *stream, a.getDst(), size));
  return Status::Ok();
}

Status Handlers::MemcpyDtoH(Executor& ex, uint64_t tag, Req req) {
  auto a = req.getMemcpyDtoH();
  uint64_t size = a.getSize();
  auto range = ex.allocations().CheckRange(a.getSrc(), size);
  if (!range.ok()) return ex.PostReply(tag, range.status());
  auto stream = ex.ResolveStream(a.getStream(), req.getThread(), req.getDevice());
  if (!stream.ok()) return ex.PostReply(tag, stream.status());
  Status st = ex.SetDevice(stream->gpu);
  // A context already broken by an earlier fault answers with its error, before any data.
  if (st.ok()) {
    st = ex.driver().StreamQuery(stream->stream);
    if (st.code() == Err::kNotReady) st = Status::Ok();
  }
  if (!st.ok() || size == 0) return ex.PostReply(tag, st);
  RETURN_IF_ERROR(ex.PostReply(tag, Status::Ok(), [](wire::Reply::Builder&) {}, size));
  ex.BeginBulkReply();
  ex.AddPending(std::make_unique<DtoHOp>(*stream, a.getSrc(), size));
  return Status::Ok();
}

Status Handlers::MemcpyDtoD(Executor& ex, uint64_t tag, Req req) {
  auto a = req.getMemcpyDtoD();
  uint64_t size = a.getSize();
  auto dst = ex.allocations().CheckRange(a.getDst(), size);
  if (!dst.ok()) return ReplyOrDefer(ex, tag, dst.status());
  auto src = ex.allocations().CheckRange(a.getSrc(), size);
  if (!src.ok()) return ReplyOrDefer(ex, tag, src.status());
  auto stream = ex.ResolveStream(a.getStream(), req.getThread(), req.getDevice());
  if (!stream.ok()) return ReplyOrDefer(ex, tag, stream.status());
  Status st = ex.SetDevice(stream->gpu);
  if (st.ok() && size > 0) st = ex.driver().MemcpyDtoD(a.getDst(), a.getSrc(), size, stream->stream);
  if (!st.ok() || tag == 0) return ReplyOrDefer(ex, tag, st);
  return ReplyWhenDone(ex, tag, {*stream});
}

Status Handlers::Memset(Executor& ex, uint64_t tag, Req req) {
  auto a = req.getMemset();
  uint64_t size = a.getSize();
  auto range = ex.allocations().CheckRange(a.getDst(), size);
  if (!range.ok()) return ReplyOrDefer(ex, tag, range.status());
  auto stream = ex.ResolveStream(a.getStream(), req.getThread(), req.getDevice());
  if (!stream.ok()) return ReplyOrDefer(ex, tag, stream.status());
  Status st = ex.SetDevice(stream->gpu);
  if (st.ok() && size > 0) st = ex.driver().Memset8(a.getDst(), a.getValue(), size, stream->stream);
  if (!st.ok() || tag == 0) return ReplyOrDefer(ex, tag, st);
  return ReplyWhenDone(ex, tag, {*stream});
}

}  // namespace remora::worker
