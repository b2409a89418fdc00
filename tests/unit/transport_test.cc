// protocol/: the transports (pipe, shm, tcp) with the requester and executor ends in one
// process: frames and bulk data in both directions. The requester blocks (main thread);
// the executor is driven non-blockingly (Poll / PollBulkChunk / Post / AcquireBulkChunk /
// CommitBulkChunk / Progress / WaitForActivity) in its own thread, as the worker does.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "remora.capnp.h"
#include "remora/base/util.h"
#include "remora/protocol/message.h"
#include "transport_harness.h"

namespace remora::transport_test {
namespace {

constexpr uint64_t kBulkSizes[] = {0, 1, 4095, kInline, kInline + 1, (5u << 20) + 3, 64u << 20};

INSTANTIATE_TEST_SUITE_P(All, TransportTest, ::testing::Values(Kind::kPipe, Kind::kShm, Kind::kTcp, Kind::kTcpSecure),
                         [](const auto& info) { return std::string(Name(info.param)); });

// The transport says what it is; callers branch on capabilities, not types.
TEST_P(TransportTest, DescribesItself) {
  EXPECT_STREQ(req().capabilities().transport, TransportOf(GetParam()));
  EXPECT_STREQ(ends_.executor->capabilities().transport, TransportOf(GetParam()));
  bool encrypted = req().Describe().find("encrypted") != std::string::npos;
  EXPECT_EQ(encrypted, GetParam() == Kind::kTcpSecure) << req().Describe();
  EXPECT_FALSE(req().Describe().empty());
  if (GetParam() == Kind::kShm) {
    EXPECT_TRUE(req().capabilities().shared_memory);
    EXPECT_EQ(req().capabilities().inline_bulk_limit, kInline);
    EXPECT_EQ(ends_.executor->SharedRegions().size(), 1u);
  }
}

// One request and one reply: kind, flags, tag and body arrive intact in both directions.
TEST_P(TransportTest, FramesRoundTrip) {
  auto request = RequestBody(7, 0);
  auto reply = ReplyBody(7, "hello from the executor");
  ExecThread ex(ends_.executor, [&](Connection& c, const std::atomic<bool>&) -> Status {
    ASSIGN_OR_RETURN(InFrame f, ExecPoll(c));
    if (f.kind() != FrameKind::kRequest || f.header.tag != 7 || f.header.flags != kFlagExpectsReply ||
        f.header.bulk_bytes != 0 || !SameBody(f, request))
      return Error(Err::kUnknown, "request arrived altered (kind {} tag {} flags {})", f.header.kind, f.header.tag,
                   f.header.flags);
    RETURN_IF_ERROR(c.Post(Frame(FrameKind::kReply, 7, reply)));
    for (int i = 0; i < 50; i++) {  // flush whatever is queued
      ASSIGN_OR_RETURN(bool moved, c.Progress());
      if (!moved) break;
    }
    return Status::Ok();
  });
  ASSERT_TRUE(req().Send(Frame(FrameKind::kRequest, 7, request, kFlagExpectsReply)).ok());
  auto got = req().Receive(kDeadlineMs);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->kind(), FrameKind::kReply);
  EXPECT_EQ(got->header.tag, 7u);
  EXPECT_EQ(got->header.bulk_bytes, 0u);
  EXPECT_TRUE(SameBody(*got, reply));
  BodyReader r(got->body);
  EXPECT_EQ(r.Root<wire::Reply>().getPointer(), 7u);
  EXPECT_EQ(std::string(r.Root<wire::Reply>().getMessage().cStr()), "hello from the executor");
  Status st = ex.Join();
  EXPECT_TRUE(st.ok()) << st.ToString();
}

TEST_P(TransportTest, ReceiveTimesOutWhenNothingComes) {
  auto start = std::chrono::steady_clock::now();
  auto got = req().Receive(30);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), Err::kTimeout) << got.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

// Host-to-device bulk of every interesting size (empty, tiny, the shm inline limit and
// one past it, several staging slots, 64 MiB) arrives byte for byte, in order.
TEST_P(TransportTest, BulkHostToDevice) {
  ExecThread ex(ends_.executor, [&](Connection& c, const std::atomic<bool>&) -> Status {
    size_t i = 0;
    for (uint64_t size : kBulkSizes) {
      ASSIGN_OR_RETURN(InFrame f, ExecPoll(c));
      if (f.header.tag != 100 + i || f.header.bulk_bytes != size)
        return Error(Err::kUnknown, "frame tag {} bulk {}, expected tag {} bulk {}", f.header.tag, f.header.bulk_bytes,
                     100 + i, size);
      ASSIGN_OR_RETURN(std::vector<std::byte> got, ExecReadBulk(c, size));
      std::string diff = FirstMismatch(Payload(size, i), got);
      if (!diff.empty()) return Error(Err::kUnknown, "{} bytes: {}", size, diff);
      i++;
    }
    // Ack, so the requester knows everything was checked.
    auto ack = ReplyBody(1);
    RETURN_IF_ERROR(c.Post(Frame(FrameKind::kReply, 1, ack)));
    for (int k = 0; k < 50; k++) {
      ASSIGN_OR_RETURN(bool moved, c.Progress());
      if (!moved) break;
    }
    return Status::Ok();
  });
  size_t i = 0;
  for (uint64_t size : kBulkSizes) {
    auto body = RequestBody(100 + i, size);
    Status st = req().Send(Frame(FrameKind::kRequest, 100 + i, body), Payload(size, i));
    ASSERT_TRUE(st.ok()) << size << ": " << st.ToString();
    i++;
  }
  auto ack = req().Receive(kDeadlineMs);
  Status st = ex.Join();
  EXPECT_TRUE(st.ok()) << st.ToString();
  ASSERT_TRUE(ack.ok()) << ack.status().ToString();
  EXPECT_EQ(ack->header.tag, 1u);
}

// Device-to-host bulk: the executor posts a reply with bulk_bytes and fills it through
// AcquireBulkChunk/CommitBulkChunk; the requester gets it with Receive + ReceiveBulk.
TEST_P(TransportTest, BulkDeviceToHost) {
  ExecThread ex(ends_.executor, [&](Connection& c, const std::atomic<bool>& done) -> Status {
    size_t i = 0;
    for (uint64_t size : kBulkSizes) {
      ASSIGN_OR_RETURN(InFrame f, ExecPoll(c));
      if (f.header.tag != 200 + i) return Error(Err::kUnknown, "unexpected tag {}", f.header.tag);
      auto reply = ReplyBody(200 + i);
      RETURN_IF_ERROR(ExecPostBulk(c, Frame(FrameKind::kReply, 200 + i, reply), Payload(size, i + 50)));
      i++;
    }
    return Pump(c, done);
  });
  size_t i = 0;
  for (uint64_t size : kBulkSizes) {
    auto body = RequestBody(200 + i, size);
    ASSERT_TRUE(req().Send(Frame(FrameKind::kRequest, 200 + i, body, kFlagExpectsReply)).ok());
    auto f = req().Receive(kDeadlineMs);
    ASSERT_TRUE(f.ok()) << size << ": " << f.status().ToString();
    ASSERT_EQ(f->header.tag, 200 + i);
    ASSERT_EQ(f->header.bulk_bytes, size);
    BodyReader r(f->body);
    EXPECT_EQ(r.Root<wire::Reply>().getPointer(), 200 + i);
    std::vector<std::byte> got(size);
    if (size > 0) {
      Status st = req().ReceiveBulk(got);
      ASSERT_TRUE(st.ok()) << size << ": " << st.ToString();
    }
    std::string diff = FirstMismatch(Payload(size, i + 50), got);
    EXPECT_TRUE(diff.empty()) << size << " bytes: " << diff;
    i++;
  }
  Status st = ex.Join();
  EXPECT_TRUE(st.ok()) << st.ToString();
}

// Many frames back to back, of mixed sizes, some with inline bulk, while the executor
// echoes each one at once: order and content survive, and on shm the 2 MiB rings wrap
// around several times (the requester only reads replies after sending everything, so
// the executor's replies queue up behind a full reply ring).
TEST_P(TransportTest, ManyFramesInFlight) {
  constexpr int kFrames = 2000;
  std::mt19937_64 rng(99);
  std::vector<std::vector<uint64_t>> bodies(kFrames);
  std::vector<size_t> bulk(kFrames);
  uint64_t ring_bytes = 0;
  for (int i = 0; i < kFrames; i++) {
    ScratchMessage msg;
    auto hello = msg.InitRoot<wire::HandshakeMessage>().initHello();
    hello.setProtocolVersion(static_cast<uint32_t>(i));
    hello.setShimVersion(std::string(rng() % 3000, static_cast<char>('a' + i % 26)));
    auto flat = msg.Flatten();
    bodies[i].assign(flat.begin(), flat.end());
    bulk[i] = rng() % 3 == 0 ? rng() % 8192 : 0;
    ring_bytes += sizeof(FrameHeader) + flat.size() * 8 + (bulk[i] + 7) / 8 * 8;
  }
  ASSERT_GT(ring_bytes, 2 * (2u << 20)) << "enough traffic to wrap the shm rings";

  ExecThread ex(ends_.executor, [&](Connection& c, const std::atomic<bool>& done) -> Status {
    for (int i = 0; i < kFrames; i++) {
      ASSIGN_OR_RETURN(InFrame f, ExecPoll(c));
      if (f.header.tag != static_cast<uint64_t>(i + 1) || f.header.bulk_bytes != bulk[i] || !SameBody(f, bodies[i]))
        return Error(Err::kUnknown, "frame {} arrived as tag {} with {} bulk bytes", i + 1, f.header.tag,
                     f.header.bulk_bytes);
      std::vector<std::byte> data;
      if (bulk[i] > 0) {
        ASSIGN_OR_RETURN(data, ExecReadBulk(c, bulk[i]));
        std::string diff = FirstMismatch(Payload(bulk[i], i), data);
        if (!diff.empty()) return Error(Err::kUnknown, "frame {} bulk: {}", i + 1, diff);
      }
      // Echo: same body, same bulk. Copy the body first: it lives in transport memory.
      std::vector<uint64_t> body(f.body.begin(), f.body.end());
      RETURN_IF_ERROR(ExecPostBulk(c, Frame(FrameKind::kReply, f.header.tag, body), data));
    }
    return Pump(c, done);
  });
  for (int i = 0; i < kFrames; i++) {
    Status st = req().Send(Frame(FrameKind::kRequest, static_cast<uint64_t>(i + 1), bodies[i]), Payload(bulk[i], i));
    ASSERT_TRUE(st.ok()) << "frame " << i + 1 << ": " << st.ToString();
  }
  for (int i = 0; i < kFrames; i++) {
    auto f = req().Receive(kDeadlineMs);
    ASSERT_TRUE(f.ok()) << "reply " << i + 1 << ": " << f.status().ToString();
    ASSERT_EQ(f->header.tag, static_cast<uint64_t>(i + 1));
    ASSERT_TRUE(SameBody(*f, bodies[i])) << "reply " << i + 1;
    ASSERT_EQ(f->header.bulk_bytes, bulk[i]);
    if (bulk[i] > 0) {
      std::vector<std::byte> got(bulk[i]);
      ASSERT_TRUE(req().ReceiveBulk(got).ok());
      ASSERT_EQ(FirstMismatch(Payload(bulk[i], i), got), "") << "reply " << i + 1;
    }
  }
  Status st = ex.Join();
  EXPECT_TRUE(st.ok()) << st.ToString();
}

// One-way frames (no reply expected, no bulk) may be batched by the transport (TCP
// coalesces them): they still arrive in call order, interleaved correctly with frames that
// expect a reply or carry bulk, and a last one arrives without any later call or Flush.
TEST_P(TransportTest, OneWayFramesKeepOrderAndAreNotHeldBack) {
  constexpr int kFrames = 500;
  auto body = RequestBody(1, 0);
  ExecThread ex(ends_.executor, [&](Connection& c, const std::atomic<bool>& done) -> Status {
    for (int i = 1; i <= kFrames + 1; i++) {
      ASSIGN_OR_RETURN(InFrame f, ExecPoll(c));
      if (f.header.tag != static_cast<uint64_t>(i))
        return Error(Err::kUnknown, "frame {} arrived in position {}", f.header.tag, i);
      bool expects = (f.header.flags & kFlagExpectsReply) != 0;
      if (f.header.bulk_bytes > 0) RETURN_IF_ERROR(ExecReadBulk(c, f.header.bulk_bytes).status());
      if (expects) RETURN_IF_ERROR(c.Post(Frame(FrameKind::kReply, f.header.tag, ReplyBody(f.header.tag, "ok"))));
    }
    return Pump(c, done);
  });
  for (int i = 1; i <= kFrames; i++) {
    bool call = i % 97 == 0;
    ConstBytes bulk = i % 89 == 0 ? Payload(100, static_cast<size_t>(i)) : ConstBytes();
    ASSERT_TRUE(req().Send(Frame(FrameKind::kRequest, i, body, call ? kFlagExpectsReply : 0), bulk).ok());
    if (call) {
      auto got = req().Receive(kDeadlineMs);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      ASSERT_EQ(got->header.tag, static_cast<uint64_t>(i));
    }
  }
  // The last one-way frame: nothing follows it, yet the executor must see it promptly.
  auto sent = std::chrono::steady_clock::now();
  ASSERT_TRUE(req().Send(Frame(FrameKind::kRequest, kFrames + 1, body)).ok());
  Status st = ex.Join();
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - sent, std::chrono::seconds(5));
}

// Device-to-host with several chunks acquired before the oldest is committed (what the
// worker's DtoH does while DMAs run): each acquired chunk is a distinct window of the
// bulk. Pipe is covered by PipeSeveralChunksInFlight below.
class TransportInflightTest : public TransportTest {};
INSTANTIATE_TEST_SUITE_P(Real, TransportInflightTest, ::testing::Values(Kind::kShm, Kind::kTcp, Kind::kTcpSecure),
                         [](const auto& info) { return std::string(Name(info.param)); });

void SeveralChunksInFlight(Connection& requester, std::unique_ptr<Connection>& executor) {
  const uint64_t sizes[] = {100000, kInline, (5u << 20) + 3};
  ExecThread ex(executor, [&](Connection& c, const std::atomic<bool>& done) -> Status {
    for (size_t i = 0; i < std::size(sizes); i++) {
      ASSIGN_OR_RETURN(InFrame f, ExecPoll(c));
      auto reply = ReplyBody(f.header.tag);
      RETURN_IF_ERROR(ExecPostBulk(c, Frame(FrameKind::kReply, f.header.tag, reply), Payload(sizes[i], i + 9),
                                   /*max_chunk=*/std::min<uint64_t>(sizes[i] / 3 + 1, 1 << 20), /*max_inflight=*/3));
    }
    return Pump(c, done);
  });
  auto requester_side = [&]() -> std::string {
    for (size_t i = 0; i < std::size(sizes); i++) {
      auto body = RequestBody(i + 1, sizes[i]);
      Status st = requester.Send(Frame(FrameKind::kRequest, i + 1, body, kFlagExpectsReply));
      if (!st.ok()) return st.ToString();
      auto f = requester.Receive(kDeadlineMs);
      if (!f.ok()) return f.status().ToString();
      if (f->header.bulk_bytes != sizes[i]) return fmt::format("bulk of {} bytes, expected {}", f->header.bulk_bytes, sizes[i]);
      std::vector<std::byte> got(sizes[i]);
      st = requester.ReceiveBulk(got);
      if (!st.ok()) return st.ToString();
      std::string diff = FirstMismatch(Payload(sizes[i], i + 9), got);
      if (!diff.empty()) return fmt::format("{} bytes: {}", sizes[i], diff);
    }
    return "";
  };
  std::string requester_error = requester_side();
  Status st = ex.Join();
  EXPECT_TRUE(st.ok()) << "executor side: " << st.ToString();
  EXPECT_EQ(requester_error, "") << "requester side";
}

TEST_P(TransportInflightTest, DeviceToHostWithSeveralChunksInFlight) {
  SeveralChunksInFlight(req(), ends_.executor);
}

// DISABLED: the pipe transport's AcquireBulkChunk computes the chunk's position from the
// bytes *committed* so far, not the bytes *acquired*: a second chunk acquired before the
// first is committed gets the same buffer and offset, and the reply's bulk is corrupted.
// The worker's DtoHOp keeps up to 4 chunks in flight (today it asks for the whole rest in
// one go, which hides this). See the report for the fix.
TEST(PipeTransport, PipeSeveralChunksInFlight) {
  Ends e;
  MakeEnds(Kind::kPipe, &e);
  SeveralChunksInFlight(*e.requester, e.executor);
}


}  // namespace
}  // namespace remora::transport_test
