// Shared harness of the transport tests (see transport_harness.h).
#include "transport_harness.h"

#include <cstring>
#include <deque>
#include <optional>

#include "remora.capnp.h"
#include "remora/base/util.h"
#include "remora/protocol/message.h"

namespace remora::transport_test {
namespace {

// Server side of a real connection: accept, handshake (no auth), welcome, adopt.
Result<std::unique_ptr<Connection>> AcceptOne(Listener& l, TransportKind kind) {
  ASSIGN_OR_RETURN(PendingConnection p, l.Accept());
  FrameSocket fs(p.socket.get());
  ServerAuthPolicy policy;
  policy.auth_required = false;
  std::vector<Fd> fds;
  ServerConnectionInfo conn;
  conn.can_encrypt = kind == TransportKind::kTcp;
  conn.loopback = PeerIsLoopback(p.socket.get());
  ASSIGN_OR_RETURN(AuthenticatedPeer peer, RunServerHandshake(fs, policy, &fds, kDeadlineMs, conn));
  SessionInfo info;
  info.session_id = 1;
  info.tenant = peer.tenant;
  info.backend = "host-emulated";
  RETURN_IF_ERROR(SendWelcome(fs, peer, info));
  return AdoptConnection(kind, std::move(p.socket), std::move(fds), peer.keys);
}

bool PastDeadline(uint64_t start) { return MonotonicNanos() - start > uint64_t{kDeadlineMs} * 1000000; }

}  // namespace

void MakeEnds(Kind kind, Ends* e) {
  if (kind == Kind::kPipe) {
    auto [r, x] = MakePipeConnectionPair();
    e->requester = std::move(r);
    e->executor = std::move(x);
  } else {
    std::string url;
    if (kind == Kind::kShm) {
      e->dir = std::make_unique<test::TempDir>();
      url = "shm://" + e->dir->File("remora.sock");
    } else {
      url = "tcp://127.0.0.1:0";
    }
    auto ep = ParseEndpoint(url);
    ASSERT_TRUE(ep.ok()) << ep.status().ToString();
    auto listener = Listen(*ep);
    ASSERT_TRUE(listener.ok()) << listener.status().ToString();
    TransportKind tk = kind == Kind::kShm ? TransportKind::kShm : TransportKind::kTcp;
    std::optional<Result<std::unique_ptr<Connection>>> adopted;
    std::thread server([&] { adopted.emplace(AcceptOne(**listener, tk)); });
    ConnectOptions opts;
    opts.timeout_ms = kDeadlineMs;
    opts.encrypt = kind == Kind::kTcpSecure ? EncryptMode::kOn : EncryptMode::kAuto;
    auto connected = Connect((*listener)->endpoint(), opts);
    server.join();
    ASSERT_TRUE(connected.ok()) << connected.status().ToString();
    ASSERT_TRUE(adopted->ok()) << adopted->status().ToString();
    EXPECT_EQ(connected->session.tenant, "local");
    e->requester = std::move(connected->connection);
    e->executor = std::move(**adopted);
  }
  e->executor->SetStaging(&e->staging);
}

Status Idle(Connection& c, uint64_t start, const char* what) {
  ASSIGN_OR_RETURN(bool moved, c.Progress());
  (void)moved;
  if (PastDeadline(start)) return Error(Err::kTimeout, "executor gave up waiting for {}", what);
  c.WaitForActivity(1000);
  return Status::Ok();
}

Result<InFrame> ExecPoll(Connection& c) {
  uint64_t start = MonotonicNanos();
  for (;;) {
    ASSIGN_OR_RETURN(std::optional<InFrame> f, c.Poll());
    if (f) return *f;
    RETURN_IF_ERROR(Idle(c, start, "a frame"));
  }
}

// Reads the bulk of the last polled frame, holding up to 3 chunks before releasing the
// oldest (as the worker does while their DMA runs).
Result<std::vector<std::byte>> ExecReadBulk(Connection& c, uint64_t total) {
  std::vector<std::byte> out(total);
  uint64_t got = 0;
  std::deque<BulkChunk> held;
  uint64_t start = MonotonicNanos();
  while (got < total || !held.empty()) {
    std::optional<BulkChunk> chunk;
    if (got < total) {
      ASSIGN_OR_RETURN(chunk, c.PollBulkChunk());
    }
    if (chunk) {
      if (chunk->offset != got || chunk->size == 0 || chunk->size > total - got)
        return Error(Err::kUnknown, "chunk at offset {} of {} bytes, expected offset {} (total {})", chunk->offset,
                     chunk->size, got, total);
      std::memcpy(out.data() + got, chunk->data, chunk->size);
      got += chunk->size;
      held.push_back(*chunk);
      if (held.size() < 3 && got < total) continue;
    }
    if (!held.empty()) {
      c.ReleaseBulkChunk(held.front());
      held.pop_front();
      continue;
    }
    RETURN_IF_ERROR(Idle(c, start, "bulk data"));
  }
  return out;
}

// Posts `frame` with `data` as its bulk, acquiring chunks of at most `max_chunk` bytes and
// keeping up to `max_inflight` acquired before committing the oldest.
Status ExecPostBulk(Connection& c, const OutFrame& frame, ConstBytes data, size_t max_chunk, size_t max_inflight) {
  RETURN_IF_ERROR(c.Post(frame, data.size()));
  uint64_t acquired = 0;
  std::deque<BulkChunk> inflight;
  uint64_t start = MonotonicNanos();
  while (acquired < data.size() || !inflight.empty()) {
    bool did = false;
    while (acquired < data.size() && inflight.size() < max_inflight) {
      ASSIGN_OR_RETURN(std::optional<BulkChunk> ch, c.AcquireBulkChunk(std::min<uint64_t>(max_chunk, data.size() - acquired)));
      if (!ch) break;
      if (ch->offset != acquired || ch->size == 0 || ch->size > std::min<uint64_t>(max_chunk, data.size() - acquired))
        return Error(Err::kUnknown, "acquired chunk at offset {} of {} bytes, expected offset {}", ch->offset, ch->size,
                     acquired);
      std::memcpy(ch->data, data.data() + ch->offset, ch->size);
      acquired += ch->size;
      inflight.push_back(*ch);
      did = true;
    }
    if (!inflight.empty()) {
      RETURN_IF_ERROR(c.CommitBulkChunk(inflight.front(), inflight.front().size));
      inflight.pop_front();
      did = true;
    }
    if (!did) RETURN_IF_ERROR(Idle(c, start, "a free bulk chunk"));
  }
  return Status::Ok();
}

// Keeps the executor's queued output moving until `done`.
Status Pump(Connection& c, const std::atomic<bool>& done) {
  while (!done.load()) {
    ASSIGN_OR_RETURN(bool moved, c.Progress());
    if (!moved) c.WaitForActivity(500);
  }
  return Status::Ok();
}

// ---- message helpers -------------------------------------------------------------------

// A request body that names the tag and size it travels with.
std::vector<uint64_t> RequestBody(uint64_t tag, uint64_t size) {
  ScratchMessage msg;
  auto req = msg.InitRoot<wire::Request>();
  req.setThread(tag);
  auto m = req.initMemcpyHtoD();
  m.setDst(tag);
  m.setSize(size);
  auto flat = msg.Flatten();
  return {flat.begin(), flat.end()};
}

std::vector<uint64_t> ReplyBody(uint64_t tag, const std::string& text) {
  ScratchMessage msg;
  auto r = msg.InitRoot<wire::Reply>();
  r.setPointer(tag);
  if (!text.empty()) r.setMessage(text);
  auto flat = msg.Flatten();
  return {flat.begin(), flat.end()};
}

OutFrame Frame(FrameKind kind, uint64_t tag, const std::vector<uint64_t>& body, uint16_t flags) {
  OutFrame f;
  f.kind = kind;
  f.tag = tag;
  f.flags = flags;
  f.body = body;
  return f;
}

bool SameBody(const InFrame& f, const std::vector<uint64_t>& body) {
  return f.body.size() == body.size() && std::memcmp(f.body.data(), body.data(), body.size() * 8) == 0;
}

// 64 MiB + change of random bytes, made once; each transfer takes a different window.
ConstBytes Payload(size_t size, size_t index) {
  static const std::vector<std::byte> data = test::RandomBytes((64u << 20) + (1u << 16), 7);
  size_t off = (index * 4099) % (1u << 16);
  return ConstBytes(data.data() + off, size);
}

std::string FirstMismatch(ConstBytes want, ConstBytes got) {
  if (want.size() != got.size()) return fmt::format("size {} != {}", got.size(), want.size());
  if (want.empty() || std::memcmp(want.data(), got.data(), want.size()) == 0) return "";
  for (size_t i = 0; i < want.size(); i++)
    if (want[i] != got[i]) return fmt::format("first difference at byte {} of {}", i, want.size());
  return "";
}

}  // namespace remora::transport_test
