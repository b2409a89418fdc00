#include "rdma_test_util.h"

#include <poll.h>
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <cstring>

#include "remora/base/util.h"
#include "remora/protocol/frame_socket.h"
#include "remora/protocol/handshake.h"

namespace remora::rdmatest {

std::vector<uint64_t> Body(uint64_t op, uint64_t a, uint64_t b) { return {op, a, b}; }

uint64_t NoticeBulkBytes(uint64_t i, uint64_t n, uint64_t bulk) { return i < n / 2 || i % 2 == 0 ? 16 : bulk; }

uint64_t Hash(ConstBytes data) {
  uint64_t h = 0xcbf29ce484222325ull;
  size_t words = data.size() / 8;
  const std::byte* p = data.data();
  for (size_t i = 0; i < words; i++) {
    uint64_t w;
    std::memcpy(&w, p + i * 8, 8);
    h = (h ^ w) * 0x100000001b3ull;
  }
  for (size_t i = words * 8; i < data.size(); i++) h = (h ^ std::to_integer<uint64_t>(p[i])) * 0x100000001b3ull;
  return h ^ data.size();
}

void FillRandom(MutableBytes data, uint64_t seed) {
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  size_t i = 0;
  for (; i + 8 <= data.size(); i += 8) {
    x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
    uint64_t v = x * 0x2545f4914f6cdd1dull;
    std::memcpy(data.data() + i, &v, 8);
  }
  for (; i < data.size(); i++) data[i] = std::byte(i * 131 + seed);
}

Result<std::byte*> HeapStaging::Allocate(size_t bytes) {
  void* p = std::aligned_alloc(4096, AlignUp(bytes, 4096));
  if (p == nullptr) return Error(Err::kMemoryAllocation, "cannot allocate {} bytes of staging", bytes);
  return static_cast<std::byte*>(p);
}

void HeapStaging::Free(std::byte* p, size_t) { std::free(p); }

namespace {

Status PostReply(Connection& c, uint64_t tag, FrameKind kind, std::vector<uint64_t> body, ConstBytes bulk,
                 const std::atomic<bool>& stop, uint64_t ms_per_chunk = 0) {
  OutFrame f;
  f.kind = kind;
  f.tag = tag;
  f.body = body;
  RETURN_IF_ERROR(c.Post(f, bulk.size()));
  uint64_t off = 0;
  while (off < bulk.size()) {
    if (stop) return Error(Err::kUnknown, "stopped");
    ASSIGN_OR_RETURN(std::optional<BulkChunk> chunk, c.AcquireBulkChunk(bulk.size() - off));
    if (!chunk) {
      RETURN_IF_ERROR(c.Progress().status());
      c.WaitForActivity(1000);
      continue;
    }
    std::memcpy(chunk->data, bulk.data() + chunk->offset, chunk->size);
    for (uint64_t waited = 0; waited < ms_per_chunk; waited += 10) {
      RETURN_IF_ERROR(c.Progress().status());
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    RETURN_IF_ERROR(c.CommitBulkChunk(*chunk, chunk->size));
    off += chunk->size;
  }
  return Status::Ok();
}

}  // namespace

Status ServeSession(Connection& c, StagingAllocator& staging, const std::atomic<bool>& stop,
                    const std::function<void()>& on_stall) {
  c.SetStaging(&staging);
  std::vector<std::byte> store;
  uint64_t frames = 0;
  while (!stop) {
    ASSIGN_OR_RETURN(std::optional<InFrame> frame, c.Poll());
    if (!frame) {
      ASSIGN_OR_RETURN(bool moved, c.Progress());
      if (!moved) c.WaitForActivity(2000);
      continue;
    }
    frames++;
    FrameHeader h = frame->header;
    std::vector<uint64_t> body(frame->body.begin(), frame->body.end());
    uint64_t op = body.empty() ? 0 : body[0];
    std::vector<std::byte> bulk(h.bulk_bytes);
    bool stalled = false;
    for (uint64_t got = 0; got < h.bulk_bytes;) {
      if (stop) return Error(Err::kUnknown, "stopped");
      ASSIGN_OR_RETURN(std::optional<BulkChunk> chunk, c.PollBulkChunk());
      if (!chunk) {
        ASSIGN_OR_RETURN(bool moved, c.Progress());
        if (!moved) c.WaitForActivity(1000);
        continue;
      }
      if (chunk->offset + chunk->size > bulk.size()) return Error(Err::kUnknown, "chunk out of range");
      std::memcpy(bulk.data() + chunk->offset, chunk->data, chunk->size);
      got += chunk->size;
      c.ReleaseBulkChunk(*chunk);
      if (op == kStall && !stalled) {
        stalled = true;
        if (on_stall) on_stall();
      }
    }
    bool reply = (h.flags & kFlagExpectsReply) != 0;
    switch (op) {
      case kEcho:
        if (reply) RETURN_IF_ERROR(PostReply(c, h.tag, FrameKind::kReply, body, {}, stop));
        break;
      case kStore:
      case kStall:
        store = std::move(bulk);
        if (reply) RETURN_IF_ERROR(PostReply(c, h.tag, FrameKind::kReply, Body(kStore, Hash(store), store.size()), {}, stop));
        break;
      case kFetch: {
        ConstBytes data = ConstBytes(store).first(std::min<size_t>(body.at(1), store.size()));
        RETURN_IF_ERROR(PostReply(c, h.tag, FrameKind::kReply, Body(kFetch, Hash(data)), data, stop));
        break;
      }
      case kSlowFetch: {
        ConstBytes data = ConstBytes(store).first(std::min<size_t>(body.at(1), store.size()));
        RETURN_IF_ERROR(PostReply(c, h.tag, FrameKind::kReply, Body(kFetch, Hash(data)), data, stop, body.at(2)));
        break;
      }
      case kCount:
        RETURN_IF_ERROR(PostReply(c, h.tag, FrameKind::kReply, Body(kCount, frames), {}, stop));
        break;
      case kPause:
        std::this_thread::sleep_for(std::chrono::milliseconds(body.at(1)));
        if (reply) RETURN_IF_ERROR(PostReply(c, h.tag, FrameKind::kReply, body, {}, stop));
        break;
      case kNotices: {
        std::vector<std::byte> payload;
        for (uint64_t i = 0; i < body.at(1); i++) {
          payload.resize(NoticeBulkBytes(i, body.at(1), body.at(2)));
          FillRandom(payload, i);
          RETURN_IF_ERROR(PostReply(c, 0, FrameKind::kNotice, Body(kNotices, i, Hash(payload)), payload, stop));
          // Keep the queue moving without waiting for the requester.
          RETURN_IF_ERROR(c.Progress().status());
        }
        break;
      }
      case kDie:
        ::raise(SIGKILL);
        break;
      default:
        return Error(Err::kInvalidValue, "unknown test operation {}", op);
    }
  }
  return Status::Ok();
}

TestServer::TestServer(const std::string& host) {
  Result<Endpoint> ep = ParseEndpoint("rdma://" + host + ":0");
  if (!ep.ok()) {
    status_ = ep.status();
    return;
  }
  Result<std::unique_ptr<Listener>> l = Listen(*ep);
  if (!l.ok()) {
    status_ = l.status();
    return;
  }
  listener_ = std::move(l).value();
  url_ = listener_->endpoint().ToUrl();
  acceptor_ = std::thread([this] { AcceptLoop(); });
}

TestServer::~TestServer() {
  stop_ = true;
  if (acceptor_.joinable()) acceptor_.join();
  for (std::thread& t : sessions_) t.join();
}

void TestServer::AcceptLoop() {
  while (!stop_) {
    struct pollfd p = {listener_->fd(), POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    Result<PendingConnection> pending = listener_->Accept();
    if (!pending.ok()) continue;
    std::lock_guard<std::mutex> lk(mu_);
    sessions_.emplace_back([this, pc = std::move(pending).value()]() mutable { Session(std::move(pc)); });
  }
}

void TestServer::Session(PendingConnection pending) {
  HeapStaging staging;  // outlives the connection
  Status end = [&]() -> Status {
    FrameSocket fs(pending.socket.get());
    ServerAuthPolicy policy;
    policy.auth_required = false;
    std::vector<Fd> fds;
    ASSIGN_OR_RETURN(AuthenticatedPeer peer, RunServerHandshake(fs, policy, &fds, 10000));
    SessionInfo info;
    info.session_id = 1;
    info.tenant = peer.tenant;
    info.backend = "test";
    RETURN_IF_ERROR(SendWelcome(fs, peer, info));
    ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn, AdoptConnection(pending.kind, std::move(pending.socket), std::move(fds)));
    return ServeSession(*conn, staging, stop_, on_stall_);
  }();
  if (std::getenv("RDMA_TEST_VERBOSE") != nullptr) std::fprintf(stderr, "test server: session ended: %s\n", end.ToString().c_str());
  std::lock_guard<std::mutex> lk(mu_);
  ended_.push_back(end);
  cv_.notify_all();
}

Status TestServer::WaitSessionEnd(int timeout_ms) {
  std::unique_lock<std::mutex> lk(mu_);
  if (!cv_.wait_for(lk, std::chrono::milliseconds(timeout_ms), [&] { return !ended_.empty(); }))
    return Error(Err::kTimeout, "no session ended within {} ms", timeout_ms);
  Status s = ended_.front();
  ended_.pop_front();
  return s;
}

Result<Reply> Call(Connection& c, uint64_t tag, const std::vector<uint64_t>& body, ConstBytes bulk, MutableBytes reply_bulk,
                   int timeout_ms) {
  OutFrame f;
  f.kind = FrameKind::kRequest;
  f.flags = kFlagExpectsReply;
  f.tag = tag;
  f.body = body;
  RETURN_IF_ERROR(c.Send(f, bulk, reply_bulk));
  for (;;) {
    ASSIGN_OR_RETURN(InFrame in, c.Receive(timeout_ms));
    if (in.kind() == FrameKind::kNotice) {
      if (in.header.bulk_bytes > 0) {
        std::vector<std::byte> sink(in.header.bulk_bytes);
        RETURN_IF_ERROR(c.ReceiveBulk(sink));
      }
      continue;
    }
    if (in.kind() != FrameKind::kReply || in.header.tag != tag)
      return Error(Err::kUnknown, "expected the reply to {}, got kind {} tag {}", tag, in.header.kind, in.header.tag);
    Reply r{in.header, std::vector<uint64_t>(in.body.begin(), in.body.end())};
    if (in.header.bulk_bytes > 0) {
      if (in.header.bulk_bytes > reply_bulk.size()) return Error(Err::kUnknown, "reply bulk larger than asked");
      RETURN_IF_ERROR(c.ReceiveBulk(reply_bulk.first(in.header.bulk_bytes)));
    }
    return r;
  }
}

}  // namespace remora::rdmatest
