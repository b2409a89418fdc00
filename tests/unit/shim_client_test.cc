// shim/: the Client facing a broken or hostile server over the TCP transport, which lets the
// server say anything in a frame header. Regression tests for findings of fuzz target `reply`.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "client.h"
#include "remora/protocol/message.h"
#include "tcp/tcp_connection.h"

namespace remora::shim {
namespace {

class ShimClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    server_.reset(sv[1]);
    SessionInfo info;
    info.session_id = 1;
    client_ = std::make_unique<Client>(MakeTcpRequester(Fd(sv[0]), "test"), info);
  }

  // Writes a frame as a server would (the socket stays open: the server is alive).
  // `error`: a reply reporting that (CUDA) error.
  void ServerSends(FrameKind kind, uint64_t tag, uint64_t bulk_bytes, bool notice_body = false, uint32_t error = 0) {
    ScratchMessage msg;
    if (notice_body) {
      msg.InitRoot<wire::Notice>().setDevicesChanged(2);
    } else {
      auto r = msg.InitRoot<wire::Reply>();
      r.setPointer(0x1000);
      if (error != 0) {
        r.setError(error);
        r.setMessage("the copy failed");
      }
    }
    auto body = msg.Flatten();
    FrameHeader h;
    h.kind = static_cast<uint16_t>(kind);
    h.tag = tag;
    h.body_words = static_cast<uint32_t>(body.size());
    h.bulk_bytes = bulk_bytes;
    ASSERT_EQ(::write(server_.get(), &h, sizeof(h)), static_cast<ssize_t>(sizeof(h)));
    ASSERT_EQ(::write(server_.get(), body.data(), body.size_bytes()), static_cast<ssize_t>(body.size_bytes()));
  }

  Status Ping(size_t reply_bulk = 16) {
    std::vector<std::byte> bulk(reply_bulk);
    return client_->Call(0, [](wire::Request::Builder& r) { r.setPing(); },
                         [](wire::Reply::Reader&) { return Status::Ok(); }, {}, bulk);
  }

  Fd server_;
  std::unique_ptr<Client> client_;
};

constexpr uint64_t kTiB = 1ull << 40;

// A reply announcing far more bulk than the call asked for ends the session with
// cudaErrorDevicesUnavailable at once; it used to allocate the announced size (1 TiB:
// bad_alloc, and the application aborted).
TEST_F(ShimClientTest, ReplyAnnouncingHugeBulkBreaksTheSession) {
  ServerSends(FrameKind::kReply, 1, kTiB);
  auto start = std::chrono::steady_clock::now();
  Status st = Ping();
  EXPECT_EQ(st.code(), Err::kDevicesUnavailable) << st.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(client_->broken().code(), Err::kDevicesUnavailable);
  EXPECT_EQ(Ping().code(), Err::kDevicesUnavailable) << "every later call fails the same way";
}

TEST_F(ShimClientTest, UnknownReplyOrNoticeWithHugeBulkBreaksTheSession) {
  for (bool notice : {false, true}) {
    SCOPED_TRACE(notice ? "notice" : "reply for an unknown request");
    SetUp();
    ServerSends(notice ? FrameKind::kNotice : FrameKind::kReply, notice ? 0 : 99, kTiB, notice);
    EXPECT_EQ(Ping().code(), Err::kDevicesUnavailable);
    EXPECT_FALSE(client_->broken().ok());
  }
}

// Small unasked-for bulk is still skipped: the session goes on.
TEST_F(ShimClientTest, SmallUnaskedBulkIsSkipped) {
  ServerSends(FrameKind::kReply, 99, 100);
  std::vector<char> junk(100, 'x');
  ASSERT_EQ(::write(server_.get(), junk.data(), junk.size()), 100);
  ServerSends(FrameKind::kReply, 1, 16);
  std::vector<char> data(16, 'y');
  ASSERT_EQ(::write(server_.get(), data.data(), data.size()), 16);
  EXPECT_TRUE(Ping().ok());
  EXPECT_TRUE(client_->broken().ok());
}

// A stream drained at the current work sequence is idle (its synchronisation is answered in
// the client, issue 45) until the client sends anything that may leave work queued or the
// server says anything; other streams are not.
TEST_F(ShimClientTest, DrainedStreamIsIdleUntilWorkIsSentOrTheServerSpeaks) {
  const StreamKey s{0x5000, 0, -1}, other{0x6000, 0, -1}, thread_default{2, 7, 0};
  EXPECT_FALSE(client_->StreamIdle(s)) << "never drained";
  client_->NoteStreamDrained(s, client_->work_sequence());
  client_->NoteStreamDrained(thread_default, client_->work_sequence());
  EXPECT_TRUE(client_->StreamIdle(s));
  EXPECT_TRUE(client_->StreamIdle(thread_default));
  EXPECT_FALSE(client_->StreamIdle(other));
  EXPECT_FALSE(client_->StreamIdle(StreamKey{2, 8, 0})) << "another thread's default stream";

  ServerSends(FrameKind::kReply, 1, 16);
  std::vector<char> data(16, 'y');
  ASSERT_EQ(::write(server_.get(), data.data(), data.size()), 16);
  ASSERT_TRUE(Ping().ok());  // a request that may leave work queued
  EXPECT_FALSE(client_->StreamIdle(s));
  EXPECT_FALSE(client_->StreamIdle(thread_default));

  client_->NoteStreamDrained(s, client_->work_sequence());
  EXPECT_TRUE(client_->StreamIdle(s));
  ServerSends(FrameKind::kNotice, 0, 0, true);
  for (int i = 0; i < 100 && client_->StreamIdle(s); i++) {
    client_->PollIdle();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_FALSE(client_->StreamIdle(s)) << "a notice from the server";

  // Drained long ago: the notes keep the last few streams, then forget.
  client_->NoteStreamDrained(s, client_->work_sequence());
  for (uint64_t h = 1; h <= 8; h++) client_->NoteStreamDrained(StreamKey{0x7000 + h, 0, -1}, client_->work_sequence());
  EXPECT_FALSE(client_->StreamIdle(s));
  EXPECT_TRUE(client_->StreamIdle(StreamKey{0x7008, 0, -1}));
}

// A posted copy into host memory (an asynchronous one into pinned memory over a transport
// that cannot share memory: PyTorch's .item()) drains its stream once its reply is in. A
// synchronisation waits for that reply instead of asking the server (one reply, not a second
// round trip); a query does not wait; work sent after the copy, or a failed copy, leaves the
// stream to the server.
TEST_F(ShimClientTest, PostedCopyDrainsItsStreamOnceItsReplyIsIn) {
  const StreamKey s{0x5000, 0, -1};
  auto ping = [](wire::Request::Builder& r) { r.setPing(); };
  std::vector<std::byte> dst(16);
  auto reply_with_bulk = [&](uint64_t tag, char fill) {
    ServerSends(FrameKind::kReply, tag, 16);
    std::vector<char> data(16, fill);
    ASSERT_EQ(::write(server_.get(), data.data(), data.size()), 16);
  };

  ASSERT_TRUE(client_->PostExpectingBulk(0, ping, dst, &s).ok());  // tag 1
  EXPECT_FALSE(client_->StreamIdle(s)) << "a query does not wait for the copy";
  std::thread server([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    reply_with_bulk(1, 'z');
  });
  EXPECT_TRUE(client_->StreamIdle(s, true)) << "a synchronisation waits for the copy's reply";
  server.join();
  EXPECT_EQ(dst[15], std::byte{'z'}) << "the copied bytes are in place when it answers";
  EXPECT_TRUE(client_->StreamIdle(s));

  ASSERT_TRUE(client_->PostExpectingBulk(0, ping, dst, &s).ok());  // tag 2
  ASSERT_TRUE(client_->Post(0, ping).ok());                         // tag 3: work after the copy
  reply_with_bulk(2, 'y');
  EXPECT_FALSE(client_->StreamIdle(s, true)) << "work sent after the copy";

  ASSERT_TRUE(client_->PostExpectingBulk(0, ping, dst, &s).ok());  // tag 4
  ServerSends(FrameKind::kReply, 4, 0, false, 700);                 // cudaErrorIllegalAddress
  EXPECT_FALSE(client_->StreamIdle(s, true)) << "a failed copy";
  EXPECT_EQ(dst[15], std::byte{'y'});
  EXPECT_FALSE(client_->TakeAsyncError().ok()) << "the failure is reported at the next synchronisation";
}

}  // namespace
}  // namespace remora::shim
