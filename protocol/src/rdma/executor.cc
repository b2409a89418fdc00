// Executor side of the RDMA transport (the worker's end). Never blocks, single-threaded.
//
// Incoming bulk: embedded bulk is copied into staging chunks; remote bulk (a whole source or
// the segments that follow the record) is RDMA-read into staging chunks, up to kChunkCount
// reads in flight, and PollBulkChunk hands the chunks out in order as their reads complete.
// When a source has been read completely the requester gets an ack (it reuses the memory).
//
// Outgoing bulk: a reply whose request named a reply target large enough is RDMA-written
// there chunk by chunk as chunks are committed, and the reply record is sent after the last
// write (RC ordering: the requester sees the data before the record). Other bulk is embedded
// in the record. Records wait in a queue while credits are short; Post never blocks.
//
// Staging chunks come from the StagingAllocator (pinned memory, DMA-able by the GPU) and are
// registered with the HCA once, the first time each is used.
#include <algorithm>
#include <cstring>
#include <deque>
#include <unordered_map>

#include "chunk_pool.h"
#include "rdma/connections.h"
#include "remora/base/log.h"
#include "remora/base/util.h"

namespace remora::rdma {
namespace {

constexpr size_t kMaxReplyTargets = 4096;  // requests whose reply is still to be posted
constexpr uint64_t kOutChunkId = uint64_t{1} << 32;
// While a reply's bulk is RDMA-written, a keepalive message this often (the requester's
// watchdog counts messages; the worker's heartbeats wait behind the reply). As the worker's
// heartbeat interval (server/worker/session/executor.h).
constexpr uint64_t kKeepaliveNs = 250'000'000;

// Staging chunks and their registrations (made on first use).
class Chunks {
 public:
  Chunks() : pool_(kChunkCount, kChunkBytes), mrs_(kChunkCount) {}
  void SetAllocator(StagingAllocator* a) { pool_.SetAllocator(a); }
  // A free chunk index, -1 if none.
  Result<int> Acquire(ibv_pd* pd) {
    ASSIGN_OR_RETURN(int i, pool_.Acquire());
    if (i >= 0 && !mrs_[size_t(i)]) {
      Result<Mr> mr = Register(pd, pool_.data(i), kChunkBytes, IBV_ACCESS_LOCAL_WRITE);
      if (!mr.ok()) {
        pool_.Release(i);
        return mr.take_status();
      }
      mrs_[size_t(i)] = std::move(mr).value();
    }
    return i;
  }
  void Release(int i) { pool_.Release(i); }
  std::byte* data(int i) const { return pool_.data(i); }
  uint32_t lkey(int i) const { return mrs_[size_t(i)]->lkey; }
  // Deregisters and frees everything (after the QP is gone).
  void Destroy() {
    mrs_.clear();
    pool_.FreeAll();
  }

 private:
  ChunkPool pool_;
  std::vector<Mr> mrs_;
};

class RdmaExecutor final : public Connection, private ChannelSink {
 public:
  RdmaExecutor(std::unique_ptr<Channel> ch, std::string peer) : ch_(std::move(ch)), peer_(std::move(peer)) {
    ch_->SetSink(this);
  }

  ~RdmaExecutor() override {
    // Best effort: let queued replies and acks reach a live client before closing.
    uint64_t deadline = MonotonicNanos() + 200'000'000;
    while (!ch_->failed() && (!queue_.empty() || pending_acks_ > 0) && MonotonicNanos() < deadline) {
      if (!Pump().ok()) break;
      WaitForActivity(10'000);
    }
    ch_->Quiesce(200);
    if (cur_) ch_->Release(*cur_);
    ch_->Shutdown();  // no DMA into the chunks from here on
    in_chunks_.Destroy();
    out_chunks_.Destroy();
  }

  const Capabilities& capabilities() const override { return RdmaCapabilities(); }
  std::string Describe() const override { return "rdma " + peer_; }

  // ---- requester side: not this end ---------------------------------------------------
  Status Send(const OutFrame&, ConstBytes, MutableBytes) override { return NotRequester(); }
  Result<InFrame> Receive(int) override { return NotRequester(); }
  Status ReceiveBulk(MutableBytes) override { return NotRequester(); }

  // ---- executor -----------------------------------------------------------------------
  void SetStaging(StagingAllocator* staging) override {
    in_chunks_.SetAllocator(staging);
    out_chunks_.SetAllocator(staging);
  }
  std::vector<SharedRegion> SharedRegions() const override { return {}; }

  Result<std::optional<InFrame>> Poll() override {
    if (ch_->failed()) return ch_->failure();
    if (cur_) {
      if (in_.given < in_.total || in_.chunks_out > 0)
        return Error(Err::kUnknown, "executor polled the next frame before consuming this one's bulk");
      ch_->Release(*cur_);
      cur_.reset();
    }
    RETURN_IF_ERROR(Pump().status());
    std::optional<InRecord> rec = ch_->TakeRecord();
    if (!rec) return std::optional<InFrame>();
    cur_ = std::move(rec);
    Result<ParsedRecord> parsed = ParseRecord(cur_->flags, cur_->bytes);
    if (!parsed.ok()) return ProtocolError(parsed.status().message());
    if (parsed->flags & kBulkWritten) return ProtocolError("a request claims written bulk");
    const FrameHeader& h = parsed->header;
    in_ = InBulk();
    in_.total = h.bulk_bytes;
    in_.embedded = parsed->embedded;
    in_.remote = (parsed->flags & (kSourceWhole | kSourceSegments)) != 0;
    if (parsed->source) RETURN_IF_ERROR(AddSource(*parsed->source));
    for (const BulkDesc& d : cur_->segments) RETURN_IF_ERROR(AddSource(d));
    if (parsed->reply) AddReplyTarget(h.tag, *parsed->reply);
    RETURN_IF_ERROR(StartReads());
    return std::optional<InFrame>(InFrame{h, parsed->body});
  }

  Result<std::optional<BulkChunk>> PollBulkChunk() override {
    if (ch_->failed()) return ch_->failure();
    if (!cur_ || in_.given >= in_.total) return std::optional<BulkChunk>();
    if (!in_.remote) {
      ASSIGN_OR_RETURN(int i, in_chunks_.Acquire(ch_->pd()));
      if (i < 0) return std::optional<BulkChunk>();
      size_t n = std::min<uint64_t>(kChunkBytes, in_.total - in_.given);
      std::memcpy(in_chunks_.data(i), in_.embedded.data() + in_.given, n);
      return Hand(BulkChunk{in_chunks_.data(i), n, in_.given, static_cast<uint32_t>(i)});
    }
    RETURN_IF_ERROR(Pump().status());
    if (in_.reads.empty() || !in_.reads.front().done) return std::optional<BulkChunk>();
    Read r = in_.reads.front();
    in_.reads.pop_front();
    return Hand(BulkChunk{in_chunks_.data(r.chunk), r.size, r.offset, static_cast<uint32_t>(r.chunk)});
  }

  void ReleaseBulkChunk(const BulkChunk& chunk) override {
    in_chunks_.Release(static_cast<int>(chunk.id));
    in_.chunks_out--;
    (void)StartReads();  // a failure is kept by the channel and reported by the next call
  }

  Status Post(const OutFrame& frame, uint64_t bulk_bytes) override {
    if (ch_->failed()) return ch_->failure();
    if (out_.committed < out_.total) return Error(Err::kUnknown, "posted a frame before the previous bulk was committed");
    FrameHeader h = MakeFrameHeader(frame, bulk_bytes);
    RETURN_IF_ERROR(ValidateFrameHeader(h));
    std::optional<BulkDesc> target;
    if (frame.kind == FrameKind::kReply) target = TakeReplyTarget(frame.tag);
    uint8_t flags = 0;
    out_ = OutBulk();
    out_.total = bulk_bytes;
    if (bulk_bytes > kInlineBulkLimit && target && target->length >= bulk_bytes) {
      flags = kBulkWritten;
      out_.target = *target;
      next_keepalive_ns_ = MonotonicNanos() + kKeepaliveNs;
    } else if (bulk_bytes > 0) {
      flags = kEmbeddedBulk;
    }
    queue_.emplace_back();
    Outgoing& o = queue_.back();
    o.prefix = MakeRecordPrefix(h, flags, nullptr, nullptr);
    o.body.assign(frame.body.begin(), frame.body.end());
    if (flags & kEmbeddedBulk) o.bulk.resize(bulk_bytes);
    o.rec.flags = flags;
    o.rec.parts = {o.prefix.span(), std::as_bytes(std::span<const uint64_t>(o.body)), ConstBytes(o.bulk)};
    o.rec.total = o.prefix.size + o.body.size() * 8 + o.bulk.size();
    o.complete = bulk_bytes == 0;
    filling_ = bulk_bytes > 0 ? &o : nullptr;
    return FlushOut();
  }

  Result<std::optional<BulkChunk>> AcquireBulkChunk(size_t max) override {
    if (ch_->failed()) return ch_->failure();
    if (out_.acquired >= out_.total) return Error(Err::kUnknown, "no bulk is pending");
    ASSIGN_OR_RETURN(int i, out_chunks_.Acquire(ch_->pd()));
    if (i < 0) {
      RETURN_IF_ERROR(Pump().status());  // write completions free chunks
      ASSIGN_OR_RETURN(i, out_chunks_.Acquire(ch_->pd()));
      if (i < 0) return std::optional<BulkChunk>();
    }
    size_t n = std::min<uint64_t>({max, kChunkBytes, out_.total - out_.acquired});
    BulkChunk c{out_chunks_.data(i), n, out_.acquired, static_cast<uint32_t>(i)};
    out_.acquired += n;
    return std::optional<BulkChunk>(c);
  }

  Status CommitBulkChunk(const BulkChunk& chunk, size_t bytes) override {
    if (ch_->failed()) return ch_->failure();
    RETURN_IF_ERROR(MaybeKeepalive());
    if (bytes > chunk.size || filling_ == nullptr) return Error(Err::kUnknown, "committed more than the chunk holds");
    out_.acquired -= chunk.size - bytes;  // a short chunk gives its tail back
    if (out_.target && bytes > 0) {
      // The chunk is released when the write completes (OnOneSidedDone).
      RETURN_IF_ERROR(ch_->PostWrite(kOutChunkId | chunk.id, chunk.data, out_chunks_.lkey(static_cast<int>(chunk.id)),
                                     out_.target->addr + chunk.offset, out_.target->rkey, static_cast<uint32_t>(bytes)));
    } else {
      if (bytes > 0) std::memcpy(filling_->bulk.data() + chunk.offset, chunk.data, bytes);
      out_chunks_.Release(static_cast<int>(chunk.id));
    }
    out_.committed += bytes;
    if (out_.committed == out_.total) {
      filling_->complete = true;  // posted after every write of its bulk
      filling_ = nullptr;
      return FlushOut();
    }
    return Status::Ok();
  }

  Result<bool> Progress() override {
    if (ch_->failed()) return ch_->failure();
    return Pump();
  }

  void WaitForActivity(int64_t timeout_us) override {
    uint64_t now = MonotonicNanos();
    uint64_t deadline = now + uint64_t(std::max<int64_t>(timeout_us, 0)) * 1000;
    uint64_t spin_until = std::min(deadline, now + SpinNanos());
    do {
      Result<bool> moved = Pump();
      if (!moved.ok() || *moved || Ready()) return;
    } while (MonotonicNanos() < spin_until);
    if (!ch_->ArmCq().ok()) return;
    Result<bool> moved = Pump();
    if (!moved.ok() || *moved || Ready()) return;
    now = MonotonicNanos();
    if (now >= deadline) return;
    ch_->HandleWakeup(ch_->WaitFds(static_cast<int>((deadline - now + 999'999) / 1'000'000)));
  }

 private:
  struct Read {
    int chunk = -1;
    uint64_t offset = 0;
    uint32_t size = 0;
    bool done = false;
  };
  // Bulk of the frame returned by the last Poll.
  struct InBulk {
    uint64_t total = 0;
    bool remote = false;
    ConstBytes embedded;
    std::deque<BulkDesc> sources;  // not yet completely issued; front partly
    uint64_t front_issued = 0;     // bytes of sources.front() already issued
    uint64_t described = 0;        // bytes described by sources so far
    std::deque<uint64_t> ends;     // end offset of each source, until acked
    uint64_t issued = 0, done = 0, given = 0;
    std::deque<Read> reads;        // in flight or done, not yet handed out
    int chunks_out = 0;
  };
  // Bulk of the frame posted last.
  struct OutBulk {
    uint64_t total = 0, acquired = 0, committed = 0;
    std::optional<BulkDesc> target;
  };
  struct Outgoing {
    RecordPrefix prefix;
    std::vector<uint64_t> body;
    std::vector<std::byte> bulk;  // embedded bulk
    Channel::OutRecord rec;
    bool complete = false;
  };

  static Status NotRequester() { return Error(Err::kNotSupported, "requester call on the executor side of an RDMA connection"); }

  Status ProtocolError(std::string_view what) {
    ch_->Fail(Error(Err::kDevicesUnavailable, "client {} broke the RDMA protocol: {}", peer_, what));
    return ch_->failure();
  }

  Result<std::optional<BulkChunk>> Hand(const BulkChunk& c) {
    in_.given += c.size;
    in_.chunks_out++;
    return std::optional<BulkChunk>(c);
  }

  Status AddSource(const BulkDesc& d) {
    if (!in_.remote || d.length == 0 || d.length > in_.total - in_.described) return ProtocolError("bad bulk segment");
    in_.sources.push_back(d);
    in_.described += d.length;
    in_.ends.push_back(in_.described);
    return Status::Ok();
  }

  Status StartReads() {
    while (!in_.sources.empty()) {
      ASSIGN_OR_RETURN(int i, in_chunks_.Acquire(ch_->pd()));
      if (i < 0) break;
      const BulkDesc& s = in_.sources.front();
      uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(kChunkBytes, s.length - in_.front_issued));
      Status st = ch_->PostRead(i, in_chunks_.data(i), in_chunks_.lkey(i), s.addr + in_.front_issued, s.rkey, n);
      if (!st.ok()) {
        in_chunks_.Release(i);
        return st;
      }
      in_.reads.push_back(Read{i, in_.issued, n, false});
      in_.issued += n;
      in_.front_issued += n;
      if (in_.front_issued == s.length) {
        in_.sources.pop_front();
        in_.front_issued = 0;
      }
    }
    return Status::Ok();
  }

  void AddReplyTarget(uint64_t tag, const BulkDesc& d) {
    if (targets_.size() >= kMaxReplyTargets) {
      while (!target_order_.empty() && targets_.size() >= kMaxReplyTargets) {
        targets_.erase(target_order_.front());
        target_order_.pop_front();
      }
    }
    if (targets_.insert_or_assign(tag, d).second) target_order_.push_back(tag);
  }

  std::optional<BulkDesc> TakeReplyTarget(uint64_t tag) {
    auto it = targets_.find(tag);
    if (it == targets_.end()) return std::nullopt;
    BulkDesc d = it->second;
    targets_.erase(it);
    if (!target_order_.empty() && target_order_.front() == tag) target_order_.pop_front();
    return d;
  }

  // Completions, new reads, queued sends. Returns whether anything moved.
  Result<bool> Pump() {
    ASSIGN_OR_RETURN(bool moved, ch_->Pump());
    if (!in_.sources.empty()) RETURN_IF_ERROR(StartReads());
    size_t before = queue_.size();
    RETURN_IF_ERROR(FlushOut());
    RETURN_IF_ERROR(MaybeKeepalive());
    return moved || queue_.size() != before;
  }

  // The requester sees nothing of a reply's bulk that is RDMA-written into its memory until
  // the reply's record comes after the last write, and frames wait behind that record: a
  // long transfer (a slow link, a loaded machine) would look like a silent server to its
  // watchdog. A keepalive every kKeepaliveNs while such a bulk is committed says otherwise.
  Status MaybeKeepalive() {
    if (filling_ == nullptr || !out_.target || !ch_->CanSend()) return Status::Ok();
    uint64_t now = MonotonicNanos();
    if (now < next_keepalive_ns_) return Status::Ok();
    next_keepalive_ns_ = now + kKeepaliveNs;
    return ch_->SendKeepalive();
  }

  Status FlushOut() {
    if (pending_acks_ > 0 && ch_->CanSend()) {
      RETURN_IF_ERROR(ch_->SendAck(pending_acks_));
      pending_acks_ = 0;
    }
    while (!queue_.empty() && queue_.front().complete) {
      ASSIGN_OR_RETURN(bool done, ch_->SendSome(queue_.front().rec));
      if (!done) break;
      queue_.pop_front();
    }
    return Status::Ok();
  }

  bool Ready() const {
    bool consumed = !cur_ || (in_.given >= in_.total && in_.chunks_out == 0);
    if (ch_->failed() || (ch_->HasRecord() && consumed)) return true;
    if (!in_.reads.empty() && in_.reads.front().done) return true;
    if (!queue_.empty() && queue_.front().complete && ch_->CanSend()) return true;
    return pending_acks_ > 0 && ch_->CanSend();
  }

  // ChannelSink
  void OnSegment(const BulkDesc& d) override {
    if (!cur_) return (void)ProtocolError("a bulk segment without a frame");
    (void)AddSource(d);
  }
  void OnAck(uint64_t) override { (void)ProtocolError("an ack from the client"); }
  void OnOneSidedDone(uint64_t id) override {
    if (id & kOutChunkId) {
      out_chunks_.Release(static_cast<int>(id & 0xffffffff));
      return;
    }
    // Reads complete in the order they were posted.
    for (Read& r : in_.reads) {
      if (r.done) continue;
      r.done = true;
      in_.done += r.size;
      break;
    }
    while (!in_.ends.empty() && in_.ends.front() <= in_.done) {
      in_.ends.pop_front();
      pending_acks_++;
    }
  }

  // Declared first: the channel (QP, PD) outlives the chunk registrations.
  std::unique_ptr<Channel> ch_;
  std::string peer_;
  Chunks in_chunks_, out_chunks_;
  std::optional<InRecord> cur_;
  InBulk in_;
  OutBulk out_;
  std::deque<Outgoing> queue_;
  Outgoing* filling_ = nullptr;  // the queued record whose bulk is being committed
  uint64_t pending_acks_ = 0;
  uint64_t next_keepalive_ns_ = 0;  // while a reply's bulk is RDMA-written (MaybeKeepalive)
  std::unordered_map<uint64_t, BulkDesc> targets_;  // reply targets by request tag
  std::deque<uint64_t> target_order_;
};

}  // namespace

std::unique_ptr<Connection> MakeRdmaExecutor(std::unique_ptr<Channel> channel, std::string peer) {
  return std::make_unique<RdmaExecutor>(std::move(channel), std::move(peer));
}

}  // namespace remora::rdma
