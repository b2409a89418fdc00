// FrameReader (protocol/src/tcp/frame_reader.*): the tcp requester's one-recv reads. A frame
// that arrives in pieces, a timeout in the middle of one, bulk split between the reader's
// buffer and the socket, and a hostile header.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <thread>
#include <vector>

#include "remora/base/fd.h"
#include "remora/protocol/frame.h"
#include "tcp/frame_reader.h"

namespace remora {
namespace {

struct Pair {
  Fd a, b;  // a: the reader's end
  Pair() {
    int sv[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    a = Fd(sv[0]);
    b = Fd(sv[1]);
  }
  void Write(const void* p, size_t n) { ASSERT_EQ(::write(b.get(), p, n), static_cast<ssize_t>(n)); }
};

std::vector<std::byte> FrameBytes(uint64_t tag, std::vector<uint64_t> body, uint64_t bulk_bytes, uint32_t reserved = 0) {
  FrameHeader h;
  h.kind = static_cast<uint16_t>(FrameKind::kReply);
  h.tag = tag;
  h.body_words = static_cast<uint32_t>(body.size());
  h.bulk_bytes = bulk_bytes;
  h.reserved = reserved;
  std::vector<std::byte> out(sizeof(h) + body.size() * 8);
  std::memcpy(out.data(), &h, sizeof(h));
  std::memcpy(out.data() + sizeof(h), body.data(), body.size() * 8);
  return out;
}

TEST(FrameReader, ReadsFrameBodyAndBulkThatArriveTogether) {
  Pair p;
  auto f = FrameBytes(7, {0x1111, 0x2222}, 5, 0xabcd);
  f.insert(f.end(), {std::byte{1}, std::byte{2}, std::byte{3}, std::byte{4}, std::byte{5}});
  p.Write(f.data(), f.size());
  FrameReader r(p.a.get(), 0);
  uint32_t reserved = 0;
  auto got = r.Read(-1, 1024, &reserved);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->header.tag, 7u);
  EXPECT_EQ(got->header.reserved, 0u);
  EXPECT_EQ(reserved, 0xabcdu);
  ASSERT_EQ(got->body.size(), 2u);
  EXPECT_EQ(got->body[1], 0x2222u);
  std::vector<std::byte> bulk(5);
  ASSERT_TRUE(r.ReadBulk(bulk).ok());
  EXPECT_EQ(bulk[4], std::byte{5});
}

TEST(FrameReader, ATimeoutInsideAFrameKeepsTheStreamInStep) {
  Pair p;
  auto f = FrameBytes(9, {42}, 0);
  FrameReader r(p.a.get(), 0);
  uint32_t reserved;
  EXPECT_EQ(r.Read(0, 1024, &reserved).status().code(), Err::kTimeout);  // nothing yet
  p.Write(f.data(), 10);                                                 // part of the header
  EXPECT_EQ(r.Read(0, 1024, &reserved).status().code(), Err::kTimeout);
  p.Write(f.data() + 10, f.size() - 12);  // all but the body's last 2 bytes
  EXPECT_EQ(r.Read(20, 1024, &reserved).status().code(), Err::kTimeout);
  p.Write(f.data() + f.size() - 2, 2);
  auto got = r.Read(0, 1024, &reserved);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->header.tag, 9u);
  EXPECT_EQ(got->body[0], 42u);
}

TEST(FrameReader, BulkLargerThanTheBufferLandsInItsDestination) {
  Pair p;
  const size_t n = 3 << 20;
  std::vector<std::byte> data(n);
  for (size_t i = 0; i < n; i++) data[i] = std::byte(i * 131 % 251);
  std::thread writer([&] {
    auto f = FrameBytes(1, {3}, n);
    p.Write(f.data(), f.size());
    for (size_t off = 0; off < n;) {
      ssize_t w = ::write(p.b.get(), data.data() + off, std::min<size_t>(n - off, 100000));
      ASSERT_GT(w, 0);
      off += static_cast<size_t>(w);
    }
    auto g = FrameBytes(2, {5}, 0);
    p.Write(g.data(), g.size());
  });
  struct Join {
    std::thread& t;
    ~Join() { t.join(); }
  } join{writer};
  FrameReader r(p.a.get(), 1000);
  uint32_t reserved;
  auto got = r.Read(-1, 1024, &reserved);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  std::vector<std::byte> back(n);
  ASSERT_TRUE(r.ReadBulk(back).ok());
  EXPECT_EQ(back, data);
  auto next = r.Read(-1, 1024, &reserved);  // the frame after the bulk, read from where it ended
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->header.tag, 2u);
  EXPECT_EQ(next->body[0], 5u);
}

TEST(FrameReader, RefusesABadHeaderAndABodyOverTheLimitAndSeesThePeerLeave) {
  {
    Pair p;
    auto f = FrameBytes(1, {1, 2, 3}, 0);
    f[0] = std::byte{0};  // magic
    p.Write(f.data(), f.size());
    FrameReader r(p.a.get(), 0);
    uint32_t reserved;
    EXPECT_FALSE(r.Read(-1, 1024, &reserved).ok());
  }
  {
    Pair p;
    auto f = FrameBytes(1, {1, 2, 3}, 0);
    p.Write(f.data(), f.size());
    FrameReader r(p.a.get(), 0);
    uint32_t reserved;
    auto got = r.Read(-1, 2, &reserved);
    EXPECT_EQ(got.status().code(), Err::kInvalidValue);
  }
  {
    Pair p;
    FrameReader r(p.a.get(), 0);
    p.b = Fd();
    uint32_t reserved;
    EXPECT_EQ(r.Read(-1, 1024, &reserved).status().code(), Err::kDevicesUnavailable);
  }
}

}  // namespace
}  // namespace remora
