// In-process transport for unit tests: two Connection ends over mutex-protected queues.
// Bulk data is copied into the queued frame, so the executor side sees it as one chunk.
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>

#include "remora/base/util.h"
#include "remora/protocol/transport.h"

namespace remora {
namespace {

struct QueuedFrame {
  FrameHeader header;
  std::vector<uint64_t> body;
  std::vector<std::byte> bulk;
};

struct Channel {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<QueuedFrame> frames;
  bool closed = false;
};

struct PipeShared {
  Channel to_executor;
  Channel to_requester;
};

class PipeConnection final : public Connection {
 public:
  PipeConnection(std::shared_ptr<PipeShared> shared, bool requester)
      : shared_(std::move(shared)),
        in_(requester ? shared_->to_requester : shared_->to_executor),
        out_(requester ? shared_->to_executor : shared_->to_requester) {}
  ~PipeConnection() override {
    for (Channel* c : {&in_, &out_}) {
      std::lock_guard<std::mutex> lock(c->mu);
      c->closed = true;
      c->cv.notify_all();
    }
  }

  const Capabilities& capabilities() const override {
    static const Capabilities caps = {"pipe", false, false, false, false, ~0ull};
    return caps;
  }
  std::string Describe() const override { return "pipe (in-process)"; }

  Status Send(const OutFrame& frame, ConstBytes bulk, MutableBytes) override {
    QueuedFrame q = Make(frame, bulk.size());
    q.bulk.assign(bulk.begin(), bulk.end());
    return Push(std::move(q));
  }

  Result<InFrame> Receive(int timeout_ms) override {
    std::unique_lock<std::mutex> lock(in_.mu);
    auto ready = [&] { return !in_.frames.empty() || in_.closed; };
    if (timeout_ms < 0) in_.cv.wait(lock, ready);
    else if (!in_.cv.wait_for(lock, std::chrono::milliseconds(timeout_ms), ready))
      return Error(Err::kTimeout, "timed out after {} ms", timeout_ms);
    if (in_.frames.empty()) return Error(Err::kDevicesUnavailable, "pipe peer closed");
    current_ = std::move(in_.frames.front());
    in_.frames.pop_front();
    return View(current_);
  }

  Status ReceiveBulk(MutableBytes dst) override {
    if (dst.size() != current_.bulk.size())
      return Error(Err::kInvalidValue, "bulk size mismatch ({} expected, {} asked)", current_.bulk.size(), dst.size());
    std::memcpy(dst.data(), current_.bulk.data(), dst.size());
    return Status::Ok();
  }

  void SetStaging(StagingAllocator*) override {}
  std::vector<SharedRegion> SharedRegions() const override { return {}; }

  Result<std::optional<InFrame>> Poll() override {
    std::lock_guard<std::mutex> lock(in_.mu);
    if (in_.frames.empty()) {
      if (in_.closed) return Error(Err::kDevicesUnavailable, "pipe peer closed");
      return std::optional<InFrame>();
    }
    current_ = std::move(in_.frames.front());
    in_.frames.pop_front();
    bulk_given_ = false;
    return std::optional<InFrame>(View(current_));
  }

  Result<std::optional<BulkChunk>> PollBulkChunk() override {
    if (bulk_given_ || current_.bulk.empty()) return std::optional<BulkChunk>();
    bulk_given_ = true;
    return std::optional<BulkChunk>(BulkChunk{current_.bulk.data(), current_.bulk.size(), 0, 0});
  }
  void ReleaseBulkChunk(const BulkChunk&) override {}

  Status Post(const OutFrame& frame, uint64_t bulk_bytes) override {
    pending_ = Make(frame, bulk_bytes);
    pending_.bulk.resize(bulk_bytes);
    pending_filled_ = 0;
    pending_acquired_ = 0;
    if (bulk_bytes == 0) return Push(std::move(pending_));
    return Status::Ok();
  }

  Result<std::optional<BulkChunk>> AcquireBulkChunk(size_t max) override {
    if (pending_acquired_ >= pending_.bulk.size()) return Error(Err::kUnknown, "no bulk is pending");
    size_t n = std::min<size_t>(max, pending_.bulk.size() - pending_acquired_);
    BulkChunk c{pending_.bulk.data() + pending_acquired_, n, pending_acquired_, 0};
    pending_acquired_ += n;
    return std::optional<BulkChunk>(c);
  }

  Status CommitBulkChunk(const BulkChunk&, size_t bytes) override {
    pending_filled_ += bytes;
    if (pending_filled_ == pending_.bulk.size()) return Push(std::move(pending_));
    return Status::Ok();
  }

  Result<bool> Progress() override { return false; }

  void WaitForActivity(int64_t timeout_us) override {
    std::unique_lock<std::mutex> lock(in_.mu);
    in_.cv.wait_for(lock, std::chrono::microseconds(timeout_us),
                    [&] { return !in_.frames.empty() || in_.closed; });
  }

 private:
  static QueuedFrame Make(const OutFrame& frame, uint64_t bulk_bytes) {
    QueuedFrame q;
    q.header.kind = static_cast<uint16_t>(frame.kind);
    q.header.flags = frame.flags;
    q.header.tag = frame.tag;
    q.header.body_words = static_cast<uint32_t>(frame.body.size());
    q.header.bulk_bytes = bulk_bytes;
    q.body.assign(frame.body.begin(), frame.body.end());
    return q;
  }
  static InFrame View(const QueuedFrame& q) { return InFrame{q.header, {q.body.data(), q.body.size()}}; }

  Status Push(QueuedFrame q) {
    std::lock_guard<std::mutex> lock(out_.mu);
    if (out_.closed) return Error(Err::kDevicesUnavailable, "pipe peer closed");
    out_.frames.push_back(std::move(q));
    out_.cv.notify_all();
    return Status::Ok();
  }

  std::shared_ptr<PipeShared> shared_;
  Channel& in_;
  Channel& out_;
  QueuedFrame current_;
  bool bulk_given_ = false;
  QueuedFrame pending_;
  uint64_t pending_filled_ = 0;
  uint64_t pending_acquired_ = 0;
};

}  // namespace

std::pair<std::unique_ptr<Connection>, std::unique_ptr<Connection>> MakePipeConnectionPair() {
  auto shared = std::make_shared<PipeShared>();
  return {std::make_unique<PipeConnection>(shared, true), std::make_unique<PipeConnection>(shared, false)};
}

}  // namespace remora
