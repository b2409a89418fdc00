// The RDMA transport's bulk transfers (rdma_transport_test.cc says how these tests run):
// pageable and registered memory both ways, concurrent sends and receives, and either side
// dying in the middle of a transfer.
#include <atomic>
#include <future>

#include "rdma_transport_fixture.h"

namespace remora::rdmatest {
namespace {

TEST_F(RdmaTransport, PageableBulkRoundTrips) {
  // Inline (1 B, 4 KiB, 8 KiB), one staging segment (8 KiB + 1, 1 MiB), a partial last
  // segment (1 MiB + 3) and 64 staging segments / a 64 MiB staged reply.
  std::vector<std::byte> back(64 * kMiB);
  for (size_t n : {size_t{1}, size_t{4096}, size_t{8192}, size_t{8193}, kMiB, kMiB + 3, 64 * kMiB}) {
    std::vector<std::byte> data = RandomBytes(n, n);
    RoundTrip(data, back);
    if (HasFatalFailure()) return;
  }
  rdma::RequesterStats s = rdma::GetRequesterStats(*conn_);
  EXPECT_EQ(s.direct_sources, 0u);
  EXPECT_EQ(s.staged_segments, 2u + 2u + 64u);  // 8193, 1 MiB, 1 MiB + 3 (2), 64 MiB
  EXPECT_EQ(s.staged_replies, 4u);
  EXPECT_EQ(s.embedded_replies, 0u);
  std::printf("    requester: %s\n", s.channel.c_str());
}

TEST_F(RdmaTransport, RegisteredMemoryMovesWithoutStagingOrReRegistration) {
  const size_t n = 64 * kMiB;
  auto* src = static_cast<std::byte*>(std::aligned_alloc(4096, n + kMiB));
  auto* dst = static_cast<std::byte*>(std::aligned_alloc(4096, n + kMiB));
  ASSERT_TRUE(src != nullptr && dst != nullptr);
  FillRandom({src, n + kMiB}, 7);
  ASSERT_TRUE(rdma::RdmaRegisterHostMemory(*conn_, src, n + kMiB).ok());
  ASSERT_TRUE(rdma::RdmaRegisterHostMemory(*conn_, dst, n + kMiB).ok());
  EXPECT_EQ(rdma::RdmaRegisterHostMemory(*conn_, src + 4096, 10).code(), Err::kHostMemoryAlreadyRegistered);

  // Sub-ranges of the registered buffers, several times over.
  for (int round = 0; round < 2; round++) {
    RoundTrip({src + 100, kMiB}, {dst + 3, kMiB});
    RoundTrip({src, n}, {dst, n});
    if (HasFatalFailure()) break;
  }
  rdma::RequesterStats s = rdma::GetRequesterStats(*conn_);
  EXPECT_EQ(s.registrations, 2u);
  EXPECT_EQ(s.direct_sources, 4u);
  EXPECT_EQ(s.direct_replies, 4u);
  EXPECT_EQ(s.staged_segments, 0u);
  EXPECT_EQ(s.staged_replies, 0u);
  EXPECT_EQ(s.staging_buffers, 0u);
  EXPECT_GE(s.cache_hits, 8u);

  // Unregistered, the same memory goes through staging again.
  ASSERT_TRUE(rdma::RdmaUnregisterHostMemory(*conn_, src).ok());
  EXPECT_EQ(rdma::RdmaUnregisterHostMemory(*conn_, src).code(), Err::kHostMemoryNotRegistered);
  RoundTrip({src, kMiB}, {dst, kMiB});
  s = rdma::GetRequesterStats(*conn_);
  EXPECT_EQ(s.staged_segments, 1u);
  EXPECT_EQ(s.direct_replies, 5u);
  conn_.reset();  // deregisters before the memory goes
  std::free(src);
  std::free(dst);
}

TEST_F(RdmaTransport, ConcurrentSendAndReceive) {
  // One thread sends (echoes and 64 KiB fetches into distinct buffers), another receives.
  const int kCalls = 1500;
  std::vector<std::byte> data = RandomBytes(64 * 1024, 3);
  auto stored = Call(*conn_, ++tag_, Body(kStore), data);
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  std::vector<std::vector<std::byte>> fetched((kCalls + 99) / 100, std::vector<std::byte>(data.size()));
  uint64_t first = tag_ + 1;
  std::atomic<bool> failed{false};
  std::thread receiver([&] {
    for (int i = 0; i < kCalls; i++) {
      auto in = conn_->Receive(60000);
      if (!in.ok() || in->header.tag != first + uint64_t(i)) {
        ADD_FAILURE() << "reply " << i << ": " << (in.ok() ? fmt::format("tag {}", in->header.tag) : in.status().ToString());
        failed = true;
        return;
      }
      if (in->header.bulk_bytes > 0 && !conn_->ReceiveBulk(fetched[size_t(i) / 100]).ok()) {
        ADD_FAILURE() << "bulk " << i;
        failed = true;
        return;
      }
    }
  });
  std::vector<uint64_t> echo = Body(kEcho, 42);
  std::vector<uint64_t> fetch = Body(kFetch, data.size());
  for (int i = 0; i < kCalls && !failed; i++) {
    OutFrame f;
    f.flags = kFlagExpectsReply;
    f.tag = ++tag_;
    bool is_fetch = i % 100 == 0;
    f.body = is_fetch ? fetch : echo;
    Status st = conn_->Send(f, {}, is_fetch ? MutableBytes(fetched[size_t(i) / 100]) : MutableBytes());
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  receiver.join();
  for (const auto& b : fetched) EXPECT_EQ(std::memcmp(b.data(), data.data(), data.size()), 0);
}

// ---- failures mid-transfer --------------------------------------------------------------

TEST(RdmaFailure, RequesterKilledMidTransferEndsTheSessionCleanly) {
  REQUIRE_RDMA();
  TestServer server(RdmaAddress());
  ASSERT_TRUE(server.status().ok()) << server.status().ToString();
  std::promise<void> stalled;
  std::atomic<bool> once{false};
  server.set_on_stall([&] {
    if (!once.exchange(true)) stalled.set_value();
  });
  // The child sends 64 MiB; the executor has taken its first chunk when we kill the child.
  pid_t child = SpawnSelf({"--child-requester", server.url()});
  ASSERT_GT(child, 0);
  auto fut = stalled.get_future();
  ASSERT_EQ(fut.wait_for(std::chrono::seconds(60)), std::future_status::ready) << "the transfer never started";
  uint64_t t0 = MonotonicNanos();
  ::kill(child, SIGKILL);
  Reap(child);
  Status end = server.WaitSessionEnd(20000);
  double took = Seconds(t0);
  EXPECT_EQ(end.code(), Err::kDevicesUnavailable) << end.ToString();
  EXPECT_LT(took, 10.0);
  std::printf("    executor saw: %s (after %.2f s)\n", end.ToString().c_str(), took);

  // The server is unharmed: a new session works.
  auto c = ConnectTo(server.url());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  std::vector<std::byte> data = RandomBytes(kMiB, 9), back(kMiB);
  auto st = Call(**c, 1, Body(kStore), data);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  auto fe = Call(**c, 2, Body(kFetch, kMiB), {}, back);
  ASSERT_TRUE(fe.ok()) << fe.status().ToString();
  EXPECT_EQ(back, data);
}

void ExpectSendFailsWhenTheExecutorDiesMidTransfer(bool registered) {
  ChildServer server("die-on-stall");
  ASSERT_FALSE(server.url().empty()) << "the child server did not start";
  auto c = ConnectTo(server.url());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  std::vector<std::byte> data = RandomBytes(64 * kMiB, 5);
  if (registered) {
    ASSERT_TRUE(rdma::RdmaRegisterHostMemory(**c, data.data(), data.size()).ok());
  }
  OutFrame f;
  std::vector<uint64_t> body = Body(kStall);
  f.body = body;
  f.flags = kFlagExpectsReply;
  f.tag = 1;
  uint64_t t0 = MonotonicNanos();
  Status st = (*c)->Send(f, data);  // waits for segment acks / the source ack
  if (st.ok()) st = (*c)->Receive(-1).status();
  double took = Seconds(t0);
  EXPECT_EQ(st.code(), Err::kDevicesUnavailable) << st.ToString();
  EXPECT_LT(took, 30.0);
  std::printf("    requester saw: %s (after %.2f s)\n", st.ToString().c_str(), took);
}

TEST(RdmaFailure, ExecutorGoneMidTransferFromPageableMemory) {
  REQUIRE_RDMA();
  ExpectSendFailsWhenTheExecutorDiesMidTransfer(false);
}

TEST(RdmaFailure, ExecutorGoneMidTransferFromRegisteredMemory) {
  REQUIRE_RDMA();
  ExpectSendFailsWhenTheExecutorDiesMidTransfer(true);
}

}  // namespace
}  // namespace remora::rdmatest
