// protocol/: ReadExact / WriteExact (remora/protocol/exact_io.h) over a real socketpair: short
// reads and writes add up, an EOF mid-message is kClosed, the deadline and the stop flag end a
// wait (and soon), a write to a closed peer fails without SIGPIPE.
#include "remora/protocol/exact_io.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "remora/base/fd.h"
#include "test_util.h"

namespace remora {
namespace {

using Clock = std::chrono::steady_clock;

struct Pair {
  Fd a, b;
  Pair() {
    std::tie(a, b) = test::SocketPair();
    EXPECT_TRUE(a && b);
    int small = 4096;  // small buffers, so large writes and reads come in many pieces
    for (int fd : {a.get(), b.get()}) {
      ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
      ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    }
  }
};

long MsSince(Clock::time_point t) {
  return static_cast<long>(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count());
}

std::vector<std::byte> Bytes(size_t n, uint64_t seed) { return test::RandomBytes(n, seed); }

TEST(ExactIo, ShortWritesAndReadsAddUpToTheWholeMessage) {
  for (ExactIoLimits limits : {ExactIoLimits{}, ExactIoLimits{5000, nullptr}}) {
    Pair s;
    const auto sent = Bytes(1 << 20, 7);  // far more than the socket holds: many partial sends
    std::vector<std::byte> got(sent.size());
    ExactIo wrote = ExactIo::kFailed;
    std::thread writer([&] { wrote = WriteExact(s.a.get(), sent.data(), sent.size(), limits); });
    // The reader takes odd-sized pieces, so every send and recv is short somewhere.
    size_t at = 0;
    for (size_t piece = 1; at < got.size(); piece = piece * 3 % 7919 + 1) {
      size_t n = std::min(piece, got.size() - at);
      ASSERT_EQ(ReadExact(s.b.get(), got.data() + at, n, limits), ExactIo::kDone) << "at " << at;
      at += n;
    }
    writer.join();
    EXPECT_EQ(wrote, ExactIo::kDone);
    EXPECT_EQ(got, sent);
  }
}

TEST(ExactIo, AMessageWrittenInPiecesIsReadWhole) {
  Pair s;
  const auto sent = Bytes(3000, 8);
  std::thread writer([&] {
    for (size_t at = 0; at < sent.size(); at += 1000) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      ASSERT_EQ(WriteExact(s.a.get(), sent.data() + at, 1000), ExactIo::kDone);
    }
  });
  std::atomic<bool> stop{false};
  std::vector<std::byte> got(sent.size());
  EXPECT_EQ(ReadExact(s.b.get(), got.data(), got.size(), {5000, &stop}), ExactIo::kDone);
  writer.join();
  EXPECT_EQ(got, sent);
}

TEST(ExactIo, EofMidMessageIsClosedWithAndWithoutLimits) {
  for (ExactIoLimits limits : {ExactIoLimits{}, ExactIoLimits{5000, nullptr}}) {
    Pair s;
    char part[10] = "012345678";
    ASSERT_EQ(WriteExact(s.a.get(), part, sizeof(part)), ExactIo::kDone);
    s.a.reset();
    char whole[20];
    EXPECT_EQ(ReadExact(s.b.get(), whole, sizeof(whole), limits), ExactIo::kClosed);
  }
}

TEST(ExactIo, TheDeadlineEndsAReadAndAWriteThatCannotFinish) {
  Pair s;
  char buf[16];
  auto t = Clock::now();
  EXPECT_EQ(ReadExact(s.b.get(), buf, sizeof(buf), {150, nullptr}), ExactIo::kTimedOut);
  EXPECT_GE(MsSince(t), 150);
  EXPECT_LT(MsSince(t), 2000);

  // Nobody reads: the socket's buffers fill and the write waits for the deadline.
  const auto big = Bytes(1 << 20, 9);
  t = Clock::now();
  EXPECT_EQ(WriteExact(s.a.get(), big.data(), big.size(), {150, nullptr}), ExactIo::kTimedOut);
  EXPECT_GE(MsSince(t), 150);
  EXPECT_LT(MsSince(t), 2000);

  // A deadline of 0 takes the bytes that are there, and waits for no more.
  Pair t2;
  ASSERT_EQ(WriteExact(t2.a.get(), "abc", 3), ExactIo::kDone);
  EXPECT_EQ(ReadExact(t2.b.get(), buf, 3, {0, nullptr}), ExactIo::kDone);
  EXPECT_EQ(std::string(buf, 3), "abc");
  ASSERT_EQ(WriteExact(t2.a.get(), "abc", 3), ExactIo::kDone);
  EXPECT_EQ(ReadExact(t2.b.get(), buf, 4, {0, nullptr}), ExactIo::kTimedOut);
}

TEST(ExactIo, TheStopFlagEndsAWaitWithinASlice) {
  Pair s;
  std::atomic<bool> stop{false};
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    stop.store(true);
  });
  char buf[16];
  auto t = Clock::now();
  EXPECT_EQ(ReadExact(s.b.get(), buf, sizeof(buf), {-1, &stop}), ExactIo::kStopped);  // no deadline
  EXPECT_LT(MsSince(t), 1000);
  stopper.join();

  // Set before the call: nothing is read, though the bytes are there, and nothing is written.
  ASSERT_EQ(WriteExact(s.a.get(), "abc", 3), ExactIo::kDone);
  EXPECT_EQ(ReadExact(s.b.get(), buf, 3, {5000, &stop}), ExactIo::kStopped);
  EXPECT_EQ(WriteExact(s.a.get(), "def", 3, {5000, &stop}), ExactIo::kStopped);
  EXPECT_EQ(ReadExact(s.b.get(), buf, 3), ExactIo::kDone);
  EXPECT_EQ(std::string(buf, 3), "abc");

  // A write blocked on a full socket stops too.
  stop.store(false);
  std::thread stopper2([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    stop.store(true);
  });
  const auto big = Bytes(1 << 20, 10);
  t = Clock::now();
  EXPECT_EQ(WriteExact(s.a.get(), big.data(), big.size(), {-1, &stop}), ExactIo::kStopped);
  EXPECT_LT(MsSince(t), 1000);
  stopper2.join();
}

TEST(ExactIo, AWriteToAClosedPeerFailsWithoutSigpipe) {
  Pair s;
  s.b.reset();
  const auto data = Bytes(64 << 10, 11);
  EXPECT_EQ(WriteExact(s.a.get(), data.data(), data.size()), ExactIo::kFailed);  // EPIPE, and the test lives
  EXPECT_EQ(WriteExact(s.a.get(), data.data(), data.size(), {1000, nullptr}), ExactIo::kFailed);
}

TEST(ExactIo, ANonBlockingSocketWithoutLimitsWaitsRatherThanFailing) {
  Pair s;
  ::fcntl(s.b.get(), F_SETFL, ::fcntl(s.b.get(), F_GETFL) | O_NONBLOCK);
  const auto sent = Bytes(100, 12);
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ASSERT_EQ(WriteExact(s.a.get(), sent.data(), sent.size()), ExactIo::kDone);
  });
  std::vector<std::byte> got(sent.size());
  EXPECT_EQ(ReadExact(s.b.get(), got.data(), got.size()), ExactIo::kDone);
  writer.join();
  EXPECT_EQ(got, sent);
  EXPECT_STREQ(ExactIoName(ExactIo::kClosed), "closed by the peer");
}

}  // namespace
}  // namespace remora
