// Fuzz target `frame_stream`: frame headers, bodies and bulk trailers as they arrive on a
// stream socket - the TCP transport's executor side (the worker reading a client) and its
// requester side (the shim reading a server).
//
// Input: one mode byte (bit 0: 0 = executor side, 1 = requester side), then the bytes the
// peer sends, written into a socketpair and followed by end-of-stream. The side under test
// reads frames and their bulk until it reports an error or the stream ends. Checks besides
// memory safety: every frame handed up passed ValidateFrameHeader and its body lies in
// readable memory; bulk chunks come in order and never run past the frame's bulk; the
// connection returns every staging buffer it took.
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "fuzz_input.h"
#include "fuzz_staging.h"
#include "remora.capnp.h"
#include "remora/protocol/message.h"
#include "tcp/tcp_connection.h"

namespace remora::fuzz {
namespace {

constexpr uint64_t kMaxRequesterBulk = 1 << 20;  // this harness's buffer, not a protocol limit

uint64_t Touch(std::span<const uint64_t> body) {
  uint64_t x = 0;
  for (uint64_t w : body) x ^= w;  // every word must be readable (ASan checks)
  return x;
}

void CheckFrame(const InFrame& f) {
  if (!ValidateFrameHeader(f.header).ok()) Finding("a frame with an invalid header was handed up");
  if (f.body.size() != f.header.body_words) Finding("body size differs from the header");
  (void)Touch(f.body);
}

void RunExecutor(Fd sock) {
  CountingStaging staging;
  {
    auto conn = MakeTcpExecutor(std::move(sock));
    if (!conn.ok()) return;
    (*conn)->SetStaging(&staging);
    for (int i = 0; i < 4096; i++) {
      auto f = (*conn)->Poll();
      if (!f.ok()) break;
      if (!f->has_value()) continue;
      CheckFrame(**f);
      uint64_t bulk = (**f).header.bulk_bytes, got = 0;
      bool stop = false;
      for (int j = 0; got < bulk && j < 4096; j++) {
        auto c = (*conn)->PollBulkChunk();
        if (!c.ok()) {
          stop = true;
          break;
        }
        if (!c->has_value()) continue;
        if ((*c)->offset != got || (*c)->size == 0 || (*c)->size > bulk - got) Finding("bulk chunk out of order or too long");
        std::vector<std::byte> copy((*c)->data, (*c)->data + (*c)->size);  // readable?
        got += (*c)->size;
        (*conn)->ReleaseBulkChunk(**c);
      }
      if (stop || got < bulk) break;
    }
  }
  if (staging.live() != 0) Finding("the TCP executor leaked staging buffers", std::to_string(staging.live()));
}

void RunRequester(Fd sock) {
  auto conn = MakeTcpRequester(std::move(sock), "fuzz");
  std::vector<std::byte> bulk;
  for (int i = 0; i < 4096; i++) {
    auto f = conn->Receive(100);
    if (!f.ok()) break;
    CheckFrame(*f);
    if (f->header.bulk_bytes > 0) {
      if (f->header.bulk_bytes > kMaxRequesterBulk) break;
      bulk.resize(f->header.bulk_bytes);
      if (!conn->ReceiveBulk(bulk).ok()) break;
    }
  }
}

std::vector<uint8_t> Frame(FrameKind kind, uint64_t tag, std::span<const uint64_t> body, size_t bulk) {
  FrameHeader h;
  h.kind = static_cast<uint16_t>(kind);
  h.tag = tag;
  h.body_words = static_cast<uint32_t>(body.size());
  h.bulk_bytes = bulk;
  std::vector<uint8_t> out(sizeof(h) + body.size_bytes() + bulk);
  std::memcpy(out.data(), &h, sizeof(h));
  std::memcpy(out.data() + sizeof(h), body.data(), body.size_bytes());
  for (size_t i = 0; i < bulk; i++) out[sizeof(h) + body.size_bytes() + i] = static_cast<uint8_t>(i * 7);
  return out;
}

const Seeds& MakeSeeds() {
  static const Seeds seeds = [] {
    Seeds s;
    ScratchMessage ping;
    ping.InitRoot<wire::Request>().setPing();
    auto ping_body = ping.Flatten();
    ScratchMessage copy;
    auto m = copy.InitRoot<wire::Request>().initMemcpyHtoD();
    m.setDst(0x200000000000ull);
    m.setSize(100);
    auto copy_body = copy.Flatten();
    ScratchMessage reply;
    reply.InitRoot<wire::Reply>().setPointer(0x200000000000ull);
    auto reply_body = reply.Flatten();
    for (uint8_t side : {0, 1}) {
      FrameKind kind = side == 0 ? FrameKind::kRequest : FrameKind::kReply;
      auto body = side == 0 ? ping_body : reply_body;
      std::string tag = side == 0 ? "executor-" : "requester-";
      SeedWriter one;
      one.Put(side);
      auto f = Frame(kind, 1, body, 0);
      one.Bytes(f.data(), f.size());
      s.emplace_back(tag + "one-frame", one.bytes());
      SeedWriter two;
      two.Put(side);
      auto a = Frame(kind, 1, side == 0 ? copy_body : body, 100);
      auto b = Frame(kind, 2, body, 0);
      two.Bytes(a.data(), a.size()).Bytes(b.data(), b.size());
      s.emplace_back(tag + "bulk-then-frame", two.bytes());
      SeedWriter cut;
      cut.Put(side);
      cut.Bytes(a.data(), a.size() - 40);
      s.emplace_back(tag + "truncated-bulk", cut.bytes());
    }
    return s;
  }();
  return seeds;
}

}  // namespace
}  // namespace remora::fuzz

REMORA_FUZZ_SEEDS(remora::fuzz::MakeSeeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace remora;
  fuzz::FuzzInput in(data, size);
  uint8_t mode = in.Byte();
  auto bytes = in.Rest();
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return 0;
  // The socket buffer holds far more than libFuzzer's largest input here (-max_len in run.sh).
  int sz = 1 << 20;
  ::setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
  ::setsockopt(sv[0], SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t w = ::write(sv[1], bytes.data() + off, bytes.size() - off);
    if (w <= 0) break;
    off += static_cast<size_t>(w);
  }
  ::shutdown(sv[1], SHUT_WR);
  Fd peer(sv[1]);
  if (mode & 1) fuzz::RunRequester(Fd(sv[0]));
  else fuzz::RunExecutor(Fd(sv[0]));
  return 0;
}
