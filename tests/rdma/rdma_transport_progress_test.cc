// The RDMA transport's progress (rdma_transport_test.cc says how these tests run): keepalives
// during a slow reply, credits running out and refilling, notices queued while nobody
// receives, and an executor that dies while the requester waits.
#include <atomic>

#include "rdma_transport_fixture.h"

namespace remora::rdmatest {
namespace {

TEST_F(RdmaTransport, ASlowReplyWrittenByRdmaShowsProgress) {
  // The executor RDMA-writes a 4 MiB reply's bulk one 1 MiB chunk every 600 ms: nothing of
  // it reaches the requester's receive path until the reply's record, after the last write.
  // Its keepalives must move ReceiveProgress meanwhile, or the shim's watchdog would give a
  // live server up during a long device-to-host copy (as it did over Soft-RoCE on a loaded
  // machine: REMORA_DEADLINE_S passed inside one 64 MiB copy).
  const size_t n = 4 * kMiB;
  std::vector<std::byte> data = RandomBytes(n, 7), back(n);
  ASSERT_TRUE(Call(*conn_, ++tag_, Body(kStore), data).ok());
  std::atomic<bool> done{false};
  std::vector<uint64_t> seen;  // ReceiveProgress while the call runs, every 100 ms
  std::thread watch([&] {
    while (!done) {
      seen.push_back(conn_->ReceiveProgress());
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  auto fetched = Call(*conn_, ++tag_, Body(kSlowFetch, n, 600), {}, back);
  done = true;
  watch.join();
  ASSERT_TRUE(fetched.ok()) << fetched.status().ToString();
  EXPECT_EQ(fetched->body.at(1), Hash(data));
  EXPECT_EQ(std::memcmp(back.data(), data.data(), n), 0);
  // The reply takes at least 2.4 s; a keepalive goes every 250 ms of it. (Counted loosely:
  // a loaded machine may stall either side for a while.)
  size_t moves = 0;
  for (size_t i = 1; i < seen.size(); i++) moves += seen[i] != seen[i - 1];
  EXPECT_GE(moves, 3u) << "ReceiveProgress moved " << moves << " times in " << seen.size() * 100 << " ms of a slow reply";
}

TEST_F(RdmaTransport, ManySmallFramesExhaustAndRefillCredits) {
  // The executor pauses; the requester's sends run out of credits and wait; then everything
  // flows again. Frames carry a little inline bulk and expect no reply.
  OutFrame pause;
  std::vector<uint64_t> pause_body = Body(kPause, 300);
  pause.body = pause_body;
  pause.tag = ++tag_;
  uint64_t t0 = MonotonicNanos();
  ASSERT_TRUE(conn_->Send(pause).ok());
  const int kFrames = 3000;
  std::vector<std::byte> small = RandomBytes(100, 1);
  std::vector<uint64_t> echo = Body(kEcho, 1, 2);
  for (int i = 0; i < kFrames; i++) {
    OutFrame f;
    f.tag = ++tag_;
    f.body = echo;
    Status st = conn_->Send(f, small);
    ASSERT_TRUE(st.ok()) << i << ": " << st.ToString();
  }
  EXPECT_GE(Seconds(t0), 0.25) << "the sends should have waited for credits";
  auto count = Call(*conn_, ++tag_, Body(kCount));
  ASSERT_TRUE(count.ok()) << count.status().ToString();
  EXPECT_EQ(count->body.at(1), uint64_t{kFrames} + 2);
  std::printf("    %d frames in %.2f s; requester: %s\n", kFrames, Seconds(t0), rdma::GetRequesterStats(*conn_).channel.c_str());
}

TEST_F(RdmaTransport, NoticesQueueWhileTheRequesterIsNotReceiving) {
  // The executor posts notices while nobody receives: its queue waits for credits; the
  // requester then gets every one, in order, intact. Small notices are held in their receive
  // slots until more than half the slots are held, then copied out (credits keep flowing);
  // large ones (20000 bytes of bulk, no reply target) arrive as fragments.
  const uint64_t kNoticesN = 500, kBulk = 20000;
  OutFrame f;
  std::vector<uint64_t> body = Body(kNotices, kNoticesN, kBulk);
  f.body = body;
  f.tag = ++tag_;
  ASSERT_TRUE(conn_->Send(f).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::vector<std::byte> bulk;
  for (uint64_t i = 0; i < kNoticesN; i++) {
    auto in = conn_->Receive(30000);
    ASSERT_TRUE(in.ok()) << i << ": " << in.status().ToString();
    ASSERT_EQ(in->kind(), FrameKind::kNotice);
    ASSERT_EQ(in->body[1], i);
    uint64_t hash = in->body[2];
    bulk.resize(NoticeBulkBytes(i, kNoticesN, kBulk));
    ASSERT_EQ(in->header.bulk_bytes, bulk.size());
    ASSERT_TRUE(conn_->ReceiveBulk(bulk).ok());
    ASSERT_EQ(Hash(bulk), hash) << "notice " << i;
  }
  auto r = Call(*conn_, ++tag_, Body(kEcho));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::string stats = rdma::GetRequesterStats(*conn_).channel;
  std::printf("    requester: %s\n", stats.c_str());
  EXPECT_EQ(stats.find(" 0 records detached"), std::string::npos) << "the small notices should have been copied out";
}

TEST(RdmaFailure, ExecutorGoneWhileTheRequesterWaitsForAReply) {
  REQUIRE_RDMA();
  ChildServer server("normal");
  ASSERT_FALSE(server.url().empty()) << "the child server did not start";
  auto c = ConnectTo(server.url());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE(Call(**c, 1, Body(kEcho)).ok());
  uint64_t t0 = MonotonicNanos();
  auto r = Call(**c, 2, Body(kDie), {}, {}, -1);  // no timeout: it must not hang
  double took = Seconds(t0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Err::kDevicesUnavailable) << r.status().ToString();
  EXPECT_LT(took, 10.0);
  std::printf("    requester saw: %s (after %.2f s)\n", r.status().ToString().c_str(), took);
  // Everything after that fails at once, the same way.
  OutFrame f;
  std::vector<uint64_t> body = Body(kEcho);
  f.body = body;
  EXPECT_EQ((*c)->Send(f).code(), Err::kDevicesUnavailable);
  EXPECT_EQ((*c)->Receive(-1).status().code(), Err::kDevicesUnavailable);
}

}  // namespace
}  // namespace remora::rdmatest
