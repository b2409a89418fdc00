// Requester side of the RDMA transport (the shim's end).
//
// Send: the frame record goes out as slot messages. Its bulk is embedded when small; read by
// the executor straight from the application's memory when that memory is registered
// (RdmaRegisterHostMemory), Send then waiting for the executor's ack; otherwise copied
// through 1 MiB registered staging segments that the executor reads as they are announced
// (a pipeline of kSegmentsInFlight), Send returning once the last one is copied. A reply
// target (reply_bulk) is described in the record: registered application memory, or a
// staging buffer the reply is copied out of; if neither is available the executor embeds
// the reply's bulk in its record instead.
//
// Threads: one thread in Send and one in Receive/ReceiveBulk may run at once (the caller
// serialises each kind). mu_ guards the channel and all shared state; waits release it. One
// waiting thread at a time sleeps on the channel's descriptors (the "sleeper"); the other
// waits on cv_, which is notified whenever completions were handled.
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "rdma/connections.h"
#include "rdma/reg_cache.h"
#include "rdma/staging_pool.h"
#include "remora/base/log.h"
#include "remora/base/util.h"

namespace remora::rdma {
namespace {

constexpr int kSleepSliceMs = 50;
constexpr uint64_t kForever = UINT64_MAX;
constexpr int kRemoteAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

// Registered memory of the requester.
struct StagingBuffer {
  Memory mem;
  Mr mr;
  size_t size() const { return mem.size(); }
  std::byte* data() const { return mem.data(); }
};

struct ReplyTarget {
  MutableBytes user;                     // where the application wants the reply's bulk
  std::optional<StagingBuffer> staging;  // where it is written when `user` is not registered
};

size_t StagingCap() {
  const char* env = std::getenv("REMORA_RDMA_STAGING_MAX");
  if (env == nullptr) return kDefaultStagingCap;
  auto parsed = ParseSize(env);
  if (!parsed.ok() || !parsed->has_value()) return kDefaultStagingCap;
  return std::max<size_t>(**parsed, kSegmentBytes);
}

class RdmaRequester final : public Connection, private ChannelSink {
 public:
  RdmaRequester(std::unique_ptr<Channel> ch, std::string peer)
      : ch_(std::move(ch)), peer_(std::move(peer)),
        segments_(kSegmentBytes, kSegmentBytes * kSegmentsInFlight, [this](size_t n) { return MakeStaging(n); }),
        replies_(kSegmentBytes, StagingCap(), [this](size_t n) { return MakeStaging(n); }) {
    ch_->SetSink(this);
  }

  ~RdmaRequester() override {
    std::lock_guard<std::mutex> lk(mu_);
    if (cur_) ch_->Release(*cur_);
    ch_->Shutdown();  // no DMA into our memory from here on; registrations go next, the PD last
    pinned_.Clear();
  }

  const Capabilities& capabilities() const override { return RdmaCapabilities(); }
  std::string Describe() const override { return "rdma " + peer_; }
  // Messages received: while the executor RDMA-writes a long reply it sends keepalives.
  uint64_t ReceiveProgress() const override { return progress_.load(std::memory_order_relaxed); }

  // ---- requester ----------------------------------------------------------------------
  Status Send(const OutFrame& frame, ConstBytes bulk, MutableBytes reply_bulk) override {
    FrameHeader h = MakeFrameHeader(frame, bulk.size());
    RETURN_IF_ERROR(ValidateFrameHeader(h));
    std::unique_lock<std::mutex> lk(mu_);
    if (ch_->failed()) return ch_->failure();

    uint8_t flags = 0;
    BulkDesc source, reply;
    ConstBytes embedded;
    if (!bulk.empty()) {
      if (bulk.size() <= kInlineBulkLimit) {
        flags |= kEmbeddedBulk;
        embedded = bulk;
      } else if (const auto* e = pinned_.Find(bulk.data(), bulk.size())) {
        flags |= kSourceWhole;
        source = {reinterpret_cast<uintptr_t>(bulk.data()), e->handle->rkey, 0, bulk.size()};
        stats_.direct_sources++;
      } else {
        flags |= kSourceSegments;
      }
    }
    if (reply_bulk.size() > kInlineBulkLimit && (frame.flags & kFlagExpectsReply)) {
      ASSIGN_OR_RETURN(reply, AddReplyTarget(frame.tag, reply_bulk));
      if (reply.length > 0) flags |= kReplyTarget;
    }

    uint64_t ticket = 0;
    if (flags & kSourceWhole) {
      // Expect the executor's ack before it can possibly come.
      acks_.emplace_back();
      ticket = ++acks_issued_;
    }
    RecordPrefix prefix = MakeRecordPrefix(h, flags, &source, &reply);
    Channel::OutRecord rec;
    rec.flags = flags;
    rec.parts = {prefix.span(), std::as_bytes(frame.body), embedded};
    rec.total = prefix.size + frame.body.size_bytes() + embedded.size();
    Status send_error;
    Status st = Wait(lk, [&] {
      Result<bool> done = ch_->SendSome(rec);
      if (!done.ok()) send_error = done.take_status();
      return !send_error.ok() || *done;
    }, kForever);
    if (st.ok()) st = send_error;
    if (!st.ok()) {
      if (flags & kReplyTarget) DropReplyTarget(frame.tag);
      return st;
    }
    // The executor reads the application's buffer: it must not change before the ack.
    if (flags & kSourceWhole) return Wait(lk, [&] { return acks_done_ >= ticket; }, kForever);
    if (flags & kSourceSegments) return SendSegments(lk, bulk);
    return Status::Ok();
  }

  Result<InFrame> Receive(int timeout_ms) override {
    std::unique_lock<std::mutex> lk(mu_);
    FinishCurrent();
    uint64_t deadline = timeout_ms < 0 ? kForever : MonotonicNanos() + uint64_t(timeout_ms) * 1000000;
    Status st = Wait(lk, [&] { return ch_->HasRecord(); }, deadline);
    if (!st.ok()) {
      if (st.code() == Err::kTimeout) return Error(Err::kTimeout, "timed out after {} ms waiting for the server", timeout_ms);
      return st;
    }
    cur_ = ch_->TakeRecord();
    Result<ParsedRecord> parsed = ParseRecord(cur_->flags, cur_->bytes);
    if (parsed.ok() && (parsed->flags & (kSourceWhole | kSourceSegments | kReplyTarget)))
      parsed = Error(Err::kInvalidValue, "a reply with request-only flags 0x{:02x}", parsed->flags);
    if (!parsed.ok()) return BrokenByServer(parsed.status().message());
    cur_parsed_ = *parsed;
    bulk_taken_ = false;
    target_.reset();
    const FrameHeader& hdr = cur_parsed_.header;
    bool is_reply = hdr.kind == static_cast<uint16_t>(FrameKind::kReply);
    auto it = is_reply ? targets_.find(hdr.tag) : targets_.end();
    if (cur_parsed_.flags & kBulkWritten) {
      if (it == targets_.end() || hdr.bulk_bytes > it->second.user.size())
        return BrokenByServer(fmt::format("reply bulk written without a matching target (tag {})", hdr.tag));
      target_ = std::move(it->second);
      targets_.erase(it);
      (target_->staging ? stats_.staged_replies : stats_.direct_replies)++;
    } else if (it != targets_.end()) {
      DropReplyTarget(hdr.tag);  // answered without using its target
    }
    if (cur_parsed_.flags & kEmbeddedBulk && hdr.bulk_bytes > kInlineBulkLimit) stats_.embedded_replies++;
    return InFrame{hdr, cur_parsed_.body};
  }

  void Abort() override { ch_->ShutdownLivenessSocket(); }

  Status ReceiveBulk(MutableBytes dst) override {
    // Runs on the Receive thread, which alone owns cur_ and target_: copies go unlocked.
    if (!cur_ || cur_parsed_.header.bulk_bytes == 0 || bulk_taken_) return Error(Err::kUnknown, "no frame bulk to receive");
    if (dst.size() != cur_parsed_.header.bulk_bytes)
      return Error(Err::kInvalidValue, "bulk size mismatch ({} sent, {} expected)", cur_parsed_.header.bulk_bytes, dst.size());
    if (cur_parsed_.flags & kEmbeddedBulk) {
      std::memcpy(dst.data(), cur_parsed_.embedded.data(), dst.size());
    } else if (target_) {
      const std::byte* src = target_->staging ? target_->staging->data() : target_->user.data();
      if (src != dst.data()) std::memcpy(dst.data(), src, dst.size());
      std::lock_guard<std::mutex> lk(mu_);
      if (target_->staging) replies_.Give(std::move(*target_->staging));
      target_.reset();
    }
    bulk_taken_ = true;
    return Status::Ok();
  }

  // ---- executor side: not this end ------------------------------------------------------
  void SetStaging(StagingAllocator*) override {}
  std::vector<SharedRegion> SharedRegions() const override { return {}; }
  Result<std::optional<InFrame>> Poll() override { return NotExecutor(); }
  Result<std::optional<BulkChunk>> PollBulkChunk() override { return NotExecutor(); }
  void ReleaseBulkChunk(const BulkChunk&) override {}
  Status Post(const OutFrame&, uint64_t) override { return NotExecutor(); }
  Result<std::optional<BulkChunk>> AcquireBulkChunk(size_t) override { return NotExecutor(); }
  Status CommitBulkChunk(const BulkChunk&, size_t) override { return NotExecutor(); }
  Result<bool> Progress() override { return NotExecutor(); }
  void WaitForActivity(int64_t) override {}

  // ---- registration (connections.h) -----------------------------------------------------
  Status RegisterHostMemory(const void* p, size_t n) override {
    std::lock_guard<std::mutex> lk(mu_);
    if (ch_->failed()) return ch_->failure();
    ASSIGN_OR_RETURN(Mr mr, Register(ch_->pd(), const_cast<void*>(p), n, kRemoteAccess));
    RETURN_IF_ERROR(pinned_.Insert(p, n, std::move(mr)));  // an overlap deregisters mr again
    stats_.registrations++;
    return Status::Ok();
  }

  Status UnregisterHostMemory(const void* p) override {
    std::lock_guard<std::mutex> lk(mu_);
    if (!pinned_.Erase(p)) return Error(Err::kHostMemoryNotRegistered, "memory at {} is not registered", p);
    return Status::Ok();
  }

  RequesterStats Stats() {
    std::lock_guard<std::mutex> lk(mu_);
    RequesterStats s = stats_;
    s.cache_hits = pinned_.hits();
    s.staging_buffers = segments_.created() + replies_.created();
    s.channel = ch_->Stats();
    return s;
  }

 private:
  // The current record is unusable: drop it and fail the connection.
  Status BrokenByServer(std::string_view what) {
    ch_->Release(*cur_);
    cur_.reset();
    ch_->Fail(Error(Err::kDevicesUnavailable, "the server broke the RDMA protocol: {}", what));
    return ch_->failure();
  }

  static Status NotExecutor() { return Error(Err::kNotSupported, "executor call on the requester side of an RDMA connection"); }

  Result<StagingBuffer> MakeStaging(size_t n) {
    StagingBuffer b;
    ASSIGN_OR_RETURN(b.mem, Memory::Map(n));
    ASSIGN_OR_RETURN(b.mr, Register(ch_->pd(), b.mem.data(), n, kRemoteAccess));
    return b;
  }

  // Where the reply's bulk may be written (length 0: nowhere, it will come embedded).
  Result<BulkDesc> AddReplyTarget(uint64_t tag, MutableBytes user) {
    DropReplyTarget(tag);
    ReplyTarget t{user, std::nullopt};
    BulkDesc d;
    if (const auto* e = pinned_.Find(user.data(), user.size())) {
      d = {reinterpret_cast<uintptr_t>(user.data()), e->handle->rkey, 0, user.size()};
    } else {
      ASSIGN_OR_RETURN(std::optional<StagingBuffer> buf, replies_.Take(user.size()));
      if (!buf) return d;
      d = {reinterpret_cast<uintptr_t>(buf->data()), buf->mr->rkey, 0, user.size()};
      t.staging = std::move(buf);
    }
    targets_[tag] = std::move(t);
    return d;
  }

  void DropReplyTarget(uint64_t tag) {
    auto it = targets_.find(tag);
    if (it == targets_.end()) return;
    if (it->second.staging) replies_.Give(std::move(*it->second.staging));
    targets_.erase(it);
  }

  Status SendSegments(std::unique_lock<std::mutex>& lk, ConstBytes bulk) {
    for (size_t off = 0; off < bulk.size();) {
      size_t n = std::min(kSegmentBytes, bulk.size() - off);
      std::optional<StagingBuffer> buf;
      Status err;
      // The segment pool holds kSegmentsInFlight buffers: this waits for the executor's acks.
      RETURN_IF_ERROR(Wait(lk, [&] {
        Result<std::optional<StagingBuffer>> r = segments_.Take(kSegmentBytes);
        if (!r.ok()) err = r.take_status();
        else buf = std::move(*r);
        return !err.ok() || buf.has_value();
      }, kForever));
      RETURN_IF_ERROR(err);
      lk.unlock();
      std::memcpy(buf->data(), bulk.data() + off, n);
      lk.lock();
      RETURN_IF_ERROR(Wait(lk, [&] { return ch_->CanSend() || ch_->failed(); }, kForever));
      RETURN_IF_ERROR(ch_->SendSegment({reinterpret_cast<uintptr_t>(buf->data()), buf->mr->rkey, 0, n}));
      acks_.push_back(std::move(buf));
      acks_issued_++;
      stats_.staged_segments++;
      off += n;
    }
    return Status::Ok();
  }

  // Releases the current frame; bulk written for it but never received goes where the
  // request said it should.
  void FinishCurrent() {
    if (!cur_) return;
    if (target_) {
      if (!bulk_taken_ && target_->staging)
        std::memcpy(target_->user.data(), target_->staging->data(), cur_parsed_.header.bulk_bytes);
      if (target_->staging) replies_.Give(std::move(*target_->staging));
      target_.reset();
    }
    ch_->Release(*cur_);
    cur_.reset();
  }

  // Waits until ready() (evaluated with mu_ held, after handling completions) or the
  // deadline (kTimeout); returns the channel's failure if it fails first.
  template <typename Ready>
  Status Wait(std::unique_lock<std::mutex>& lk, Ready ready, uint64_t deadline) {
    uint64_t spin_until = MonotonicNanos() + SpinNanos();
    for (;;) {
      Result<bool> pumped = PumpChannel();
      if (pumped.ok() && *pumped) cv_.notify_all();
      if (ready()) return Status::Ok();
      if (!pumped.ok()) return pumped.take_status();
      uint64_t now = MonotonicNanos();
      if (now >= deadline) return Error(Err::kTimeout, "timed out");
      if (now < spin_until) {
        lk.unlock();
        CpuRelax();
        lk.lock();
        continue;
      }
      if (sleeper_) {
        cv_.wait_for(lk, std::chrono::milliseconds(10));
        continue;
      }
      // Become the sleeper: arm, look once more, then sleep on the descriptors unlocked.
      Status armed = ch_->ArmCq();
      pumped = PumpChannel();
      if (pumped.ok() && *pumped) cv_.notify_all();
      if (ready()) return Status::Ok();  // ready() may act (send): never evaluate it twice for nothing
      if (!armed.ok() || !pumped.ok() || *pumped) continue;
      sleeper_ = true;
      int ms = static_cast<int>(std::min<uint64_t>(kSleepSliceMs, (deadline - now) / 1000000 + 1));
      lk.unlock();
      Channel::Wakeup w = ch_->WaitFds(ms);
      lk.lock();
      sleeper_ = false;
      ch_->HandleWakeup(w);
      cv_.notify_all();
    }
  }

  // The channel's completions (mu_ held); ReceiveProgress follows its messages.
  Result<bool> PumpChannel() {
    Result<bool> pumped = ch_->Pump();
    progress_.store(ch_->messages_received(), std::memory_order_relaxed);
    return pumped;
  }

  // ChannelSink
  void OnAck(uint64_t count) override {
    for (uint64_t i = 0; i < count; i++) {
      if (acks_.empty()) return ch_->Fail(Error(Err::kDevicesUnavailable, "the server acknowledged bulk it was not sent"));
      if (acks_.front()) segments_.Give(std::move(*acks_.front()));
      acks_.pop_front();
      acks_done_++;
    }
  }
  void OnSegment(const BulkDesc&) override {
    ch_->Fail(Error(Err::kDevicesUnavailable, "the server sent a bulk segment"));
  }
  void OnOneSidedDone(uint64_t) override {}

  std::mutex mu_;
  std::condition_variable cv_;
  bool sleeper_ = false;
  // Declared first: the channel (QP, PD) outlives every registration below.
  std::unique_ptr<Channel> ch_;
  std::string peer_;
  RegistrationCache<Mr> pinned_;
  StagingPool<StagingBuffer> segments_;
  StagingPool<StagingBuffer> replies_;
  std::map<uint64_t, ReplyTarget> targets_;       // by request tag
  std::deque<std::optional<StagingBuffer>> acks_;  // bulk sources awaiting the executor's ack
  uint64_t acks_issued_ = 0, acks_done_ = 0;
  RequesterStats stats_;
  std::atomic<uint64_t> progress_{0};  // the channel's messages_received(), for any thread

  // Receive thread only.
  std::optional<InRecord> cur_;
  ParsedRecord cur_parsed_;
  std::optional<ReplyTarget> target_;
  bool bulk_taken_ = false;
};

RdmaRequester* AsRequester(Connection& c) { return dynamic_cast<RdmaRequester*>(&c); }

}  // namespace

std::unique_ptr<Connection> MakeRdmaRequester(std::unique_ptr<Channel> channel, std::string peer) {
  return std::make_unique<RdmaRequester>(std::move(channel), std::move(peer));
}

Status RdmaRegisterHostMemory(Connection& c, const void* p, size_t bytes) {
  RdmaRequester* r = AsRequester(c);
  if (r == nullptr) return Error(Err::kInvalidValue, "not the requester side of an RDMA connection");
  return r->RegisterHostMemory(p, bytes);
}

Status RdmaUnregisterHostMemory(Connection& c, const void* p) {
  RdmaRequester* r = AsRequester(c);
  if (r == nullptr) return Error(Err::kInvalidValue, "not the requester side of an RDMA connection");
  return r->UnregisterHostMemory(p);
}

RequesterStats GetRequesterStats(Connection& c) {
  RdmaRequester* r = AsRequester(c);
  return r != nullptr ? r->Stats() : RequesterStats{};
}

}  // namespace remora::rdma
