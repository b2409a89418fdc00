// protocol/: the transports when a peer dies - the requester or the executor destroyed
// (or its process killed) while the other side waits, sends or is part-way through a
// bulk transfer. Every case must end in kDevicesUnavailable in bounded time: never a hang,
// never a crash, never silent success.
#include <signal.h>
#include <sys/wait.h>

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

// Same transports and fixture as transport_test.cc, separate suite.
class TransportPeerLossTest : public TransportTest {};
INSTANTIATE_TEST_SUITE_P(All, TransportPeerLossTest, ::testing::Values(Kind::kPipe, Kind::kShm, Kind::kTcp, Kind::kTcpSecure),
                         [](const auto& info) { return std::string(Name(info.param)); });

// The executor destroyed while the requester waits for a reply: Receive fails with
// kDevicesUnavailable (a lost server), promptly, instead of hanging.
TEST_P(TransportPeerLossTest, ExecutorGoneFailsReceive) {
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    ends_.executor.reset();
  });
  auto start = std::chrono::steady_clock::now();
  auto got = req().Receive(-1);
  killer.join();
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), Err::kDevicesUnavailable) << got.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

// ... and a Send that has to wait for the executor (64 MiB it never reads) fails the same
// way once the executor is gone.
TEST_P(TransportPeerLossTest, ExecutorGoneFailsBlockedSend) {
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ends_.executor.reset();
  });
  auto start = std::chrono::steady_clock::now();
  auto body = RequestBody(1, 64u << 20);
  Status st = req().Send(Frame(FrameKind::kRequest, 1, body), Payload(64u << 20, 0));
  killer.join();
  if (st.ok()) {
    // The transport buffered it all (pipe); the next call must notice the loss.
    st = req().Send(Frame(FrameKind::kRequest, 2, body));
    if (st.ok()) st = req().Receive(-1).status();
  }
  EXPECT_EQ(st.code(), Err::kDevicesUnavailable) << st.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

// The executor dies in the middle of a device-to-host bulk: the requester's Receive or
// ReceiveBulk fails with kDevicesUnavailable, not a hang and not garbage success.
TEST_P(TransportPeerLossTest, ExecutorGoneMidReplyBulk) {
  constexpr uint64_t kSize = 64u << 20;
  ExecThread ex(ends_.executor, [&](Connection& c, const std::atomic<bool>&) -> Status {
    ASSIGN_OR_RETURN(InFrame f, ExecPoll(c));
    auto reply = ReplyBody(f.header.tag);
    RETURN_IF_ERROR(c.Post(Frame(FrameKind::kReply, f.header.tag, reply), kSize));
    uint64_t start = MonotonicNanos();
    std::optional<BulkChunk> ch;
    while (!ch) {
      ASSIGN_OR_RETURN(ch, c.AcquireBulkChunk(1 << 20));
      if (!ch) RETURN_IF_ERROR(Idle(c, start, "a chunk"));
    }
    std::memset(ch->data, 0xab, ch->size);
    RETURN_IF_ERROR(c.CommitBulkChunk(*ch, ch->size));
    for (int i = 0; i < 20; i++) (void)c.Progress();
    return Status::Ok();
  });
  auto body = RequestBody(5, kSize);
  ASSERT_TRUE(req().Send(Frame(FrameKind::kRequest, 5, body, kFlagExpectsReply)).ok());
  Status st = ex.Join();
  ASSERT_TRUE(st.ok()) << st.ToString();
  ends_.executor.reset();  // dies with 63 MiB still owed
  auto start = std::chrono::steady_clock::now();
  auto f = req().Receive(kDeadlineMs);
  Status result = f.status();
  if (f.ok()) {
    std::vector<std::byte> got(f->header.bulk_bytes);
    result = req().ReceiveBulk(got);
  }
  EXPECT_EQ(result.code(), Err::kDevicesUnavailable) << result.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

// The requester gone while the executor idles: Poll/Progress report kDevicesUnavailable
// within a bounded time, so the worker ends the session.
TEST_P(TransportPeerLossTest, RequesterGoneEndsExecutorLoop) {
  ends_.requester.reset();
  auto start = std::chrono::steady_clock::now();
  Status seen;
  Connection& c = *ends_.executor;
  while (seen.ok() && std::chrono::steady_clock::now() - start < std::chrono::seconds(5)) {
    auto f = c.Poll();
    if (!f.ok()) { seen = f.status(); break; }
    auto p = c.Progress();
    if (!p.ok()) { seen = p.status(); break; }
    c.WaitForActivity(2000);
  }
  EXPECT_EQ(seen.code(), Err::kDevicesUnavailable) << seen.ToString();
}

// Frames the requester sent before it went away are still delivered, in order, before
// the executor learns that the peer is gone (a client that sends goodbye - or a last
// asynchronous call - and exits at once). Checked here on pipe and tcp; shm is
// ShmFramesSentBeforeTheRequesterLeftAreDelivered below.
void DeliversFramesSentBeforeLeaving(Ends& e) {
  std::vector<std::vector<uint64_t>> bodies;
  for (uint64_t tag = 1; tag <= 3; tag++) {
    bodies.push_back(RequestBody(tag, 0));
    ASSERT_TRUE(e.requester->Send(Frame(FrameKind::kRequest, tag, bodies.back())).ok());
  }
  e.requester.reset();
  Connection& c = *e.executor;
  c.WaitForActivity(1000);  // what an idle worker loop does before polling
  for (uint64_t tag = 1; tag <= 3; tag++) {
    auto f = c.Poll();
    ASSERT_TRUE(f.ok()) << "frame " << tag << " was lost: " << f.status().ToString();
    ASSERT_TRUE(f->has_value()) << "frame " << tag;
    EXPECT_EQ((*f)->header.tag, tag);
    EXPECT_TRUE(SameBody(**f, bodies[tag - 1]));
  }
  auto start = std::chrono::steady_clock::now();
  Status seen;
  while (seen.ok() && std::chrono::steady_clock::now() - start < std::chrono::seconds(5)) {
    auto f = c.Poll();
    if (!f.ok()) {
      seen = f.status();
      break;
    }
    ASSERT_FALSE(f->has_value()) << "a frame that was never sent";
    c.WaitForActivity(2000);
  }
  EXPECT_EQ(seen.code(), Err::kDevicesUnavailable) << seen.ToString();
}

class TransportDrainTest : public TransportTest {};
INSTANTIATE_TEST_SUITE_P(Streams, TransportDrainTest, ::testing::Values(Kind::kPipe, Kind::kTcp),
                         [](const auto& info) { return std::string(Name(info.param)); });

TEST_P(TransportDrainTest, FramesSentBeforeTheRequesterLeftAreDelivered) { DeliversFramesSentBeforeLeaving(ends_); }

// DISABLED: ShmConnection::WaitForActivity checks the peer's socket whenever 50 ms have
// passed since the last check (always true on the first call), even when it woke because
// frames are waiting; Poll then returns kDevicesUnavailable before looking at the ring, so
// the frames - a final goodbye included - are dropped. See the report.
TEST(ShmTransport, ShmFramesSentBeforeTheRequesterLeftAreDelivered) {
  Ends e;
  MakeEnds(Kind::kShm, &e);
  DeliversFramesSentBeforeLeaving(e);
  e.executor.reset();
}

// The requester process dies in the middle of a 64 MiB host-to-device bulk (killed
// while blocked in Send): the executor, part-way through the bulk, sees
// kDevicesUnavailable from PollBulkChunk, Poll or Progress in bounded time.
TEST_P(TransportPeerLossTest, RequesterKilledMidBulk) {
  constexpr uint64_t kSize = 64u << 20;
  Connection& c = *ends_.executor;
  pid_t child = -1;
  auto body = RequestBody(9, kSize);
  if (GetParam() == Kind::kPipe) {
    // In-process: the requester object goes away after queueing the frame.
    ASSERT_TRUE(req().Send(Frame(FrameKind::kRequest, 9, body), Payload(kSize, 3)).ok());
    ends_.requester.reset();
  } else {
    ConstBytes data = Payload(kSize, 3);
    child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      // The child owns the requester now; it blocks in Send until killed.
      (void)ends_.requester->Send(Frame(FrameKind::kRequest, 9, body), data);
      ::pause();
      ::_exit(0);
    }
    ends_.requester.reset();  // the parent's copy: only the child holds the session now
  }
  auto f = ExecPoll(c);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_EQ(f->header.bulk_bytes, kSize);
  // Take the first chunk, then kill the requester.
  uint64_t got = 0;
  auto start = std::chrono::steady_clock::now();
  while (got == 0 && std::chrono::steady_clock::now() - start < std::chrono::seconds(10)) {
    auto ch = c.PollBulkChunk();
    ASSERT_TRUE(ch.ok()) << ch.status().ToString();
    if (*ch) {
      got += (*ch)->size;
      c.ReleaseBulkChunk(**ch);
    } else {
      c.WaitForActivity(1000);
    }
  }
  ASSERT_GT(got, 0u);
  if (child > 0) {
    ::kill(child, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
  }
  start = std::chrono::steady_clock::now();
  Status seen;
  while (seen.ok() && std::chrono::steady_clock::now() - start < std::chrono::seconds(5)) {
    if (got < kSize) {
      auto ch = c.PollBulkChunk();
      if (!ch.ok()) { seen = ch.status(); break; }
      if (*ch) {
        got += (*ch)->size;
        c.ReleaseBulkChunk(**ch);
        continue;
      }
    } else {
      auto nf = c.Poll();
      if (!nf.ok()) { seen = nf.status(); break; }
    }
    auto p = c.Progress();
    if (!p.ok()) { seen = p.status(); break; }
    c.WaitForActivity(2000);
  }
  EXPECT_EQ(seen.code(), Err::kDevicesUnavailable) << seen.ToString() << " (got " << got << " bytes)";
}

}  // namespace
}  // namespace remora::transport_test
