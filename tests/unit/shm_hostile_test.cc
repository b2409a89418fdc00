// protocol/ shm internals under hostile input: the executor (worker) maps a segment its
// client created and keeps writing to. Garbage there must produce errors, never a crash or
// an out-of-bounds access; Segment::Attach must refuse segments that could hurt it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>

#include "remora.capnp.h"
#include "remora/base/util.h"
#include "remora/protocol/message.h"
#include "shm/ring.h"
#include "shm/segment.h"
#include "shm/shm_connection.h"
#include "test_util.h"

namespace remora {
namespace {

using shm::Geometry;
using shm::Segment;

// A client segment (written directly by the test, playing a malicious client) and the
// executor connection over its own mapping of the same memfd.
class HostileShm : public ::testing::Test {
 protected:
  // `before_attach` may preset cursors: the executor reads them when it is built.
  void Build(const std::function<void(Segment&)>& before_attach = {}) {
    auto seg = Segment::Create(Geometry());
    ASSERT_TRUE(seg.ok()) << seg.status().ToString();
    client_ = std::move(*seg);
    if (before_attach) before_attach(client_);
    Fd dup(::fcntl(client_.fd(), F_DUPFD_CLOEXEC, 0));
    auto attached = Segment::Attach(std::move(dup));
    ASSERT_TRUE(attached.ok()) << attached.status().ToString();
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    client_sock_.reset(sv[0]);  // kept open: the client is alive, just hostile
    executor_ = MakeShmExecutor(Fd(sv[1]), std::move(*attached), "hostile");
    executor_->SetStaging(&staging_);
  }

  const Geometry& g() const { return client_.geometry(); }
  shm::RingControl& ring() { return client_.control()->request_ring; }
  std::byte* ring_data() { return client_.base() + g().request_ring(); }

  // Writes a record (header + body words) at byte offset `pos` of the request ring.
  void WriteRecord(uint64_t pos, const FrameHeader& h, const std::vector<uint64_t>& body = {}) {
    std::memcpy(ring_data() + pos, &h, sizeof(h));
    if (!body.empty()) std::memcpy(ring_data() + pos + sizeof(h), body.data(), body.size() * 8);
  }
  void Publish(uint64_t head) { ring().head.store(head, std::memory_order_release); }

  static std::vector<uint64_t> PingBody() {
    ScratchMessage msg;
    msg.InitRoot<wire::Request>().setPing();
    auto f = msg.Flatten();
    return {f.begin(), f.end()};
  }
  static FrameHeader HeaderFor(size_t body_words, uint64_t bulk = 0) {
    FrameHeader h;
    h.kind = static_cast<uint16_t>(FrameKind::kRequest);
    h.body_words = static_cast<uint32_t>(body_words);
    h.tag = 1;
    h.bulk_bytes = bulk;
    return h;
  }

  // Polls a few times: each must fail with kInvalidValue (and not crash).
  void ExpectPollFails(const char* what) {
    for (int i = 0; i < 3; i++) {
      auto f = executor_->Poll();
      ASSERT_FALSE(f.ok()) << what << ": Poll accepted a corrupt ring";
      EXPECT_EQ(f.status().code(), Err::kInvalidValue) << what << ": " << f.status().ToString();
    }
  }

  Segment client_;
  Fd client_sock_;
  test::AlignedStaging staging_;
  std::unique_ptr<Connection> executor_;
};

// Control: a record written by hand the way the requester writes it is accepted, so the
// failures below are due to the corruption alone.
TEST_F(HostileShm, HandWrittenRecordIsAccepted) {
  Build();
  auto body = PingBody();
  WriteRecord(0, HeaderFor(body.size()), body);
  Publish(sizeof(FrameHeader) + body.size() * 8);
  auto f = executor_->Poll();
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_TRUE(f->has_value());
  EXPECT_EQ((*f)->header.tag, 1u);
  EXPECT_EQ((*f)->body.size(), body.size());
}

TEST_F(HostileShm, HeadPastTailByMoreThanTheRing) {
  Build();
  Publish(g().ring_bytes + 8);
  ExpectPollFails("head = tail + ring + 8");
}

TEST_F(HostileShm, HeadFarPastTail) {
  Build();
  Publish(UINT64_MAX - 7);
  ExpectPollFails("head near 2^64");
}

TEST_F(HostileShm, HeadNotWordAligned) {
  Build();
  auto body = PingBody();
  WriteRecord(0, HeaderFor(body.size()), body);
  Publish(sizeof(FrameHeader) + body.size() * 8 + 3);
  ExpectPollFails("unaligned head");
}

TEST_F(HostileShm, HeadBehindTail) {
  Build([](Segment& s) {
    s.control()->request_ring.tail.store(4096);
    s.control()->request_ring.head.store(4096);
  });
  Publish(4000);
  ExpectPollFails("head < tail");
}

TEST_F(HostileShm, BadFrameHeaders) {
  auto body = PingBody();
  struct Case {
    const char* what;
    std::function<void(FrameHeader&)> corrupt;
  } cases[] = {
      {"bad magic", [](FrameHeader& h) { h.magic = 0x41414141; }},
      {"unknown kind", [](FrameHeader& h) { h.kind = 9; }},
      {"reserved bits", [](FrameHeader& h) { h.reserved = 0xffffffff; }},
      {"empty body", [](FrameHeader& h) { h.body_words = 0; }},
      {"oversize body", [](FrameHeader& h) { h.body_words = kMaxBodyWords + 1; }},
      {"absurd bulk", [](FrameHeader& h) { h.bulk_bytes = ~0ull; }},
  };
  for (const Case& c : cases) {
    Build();
    FrameHeader h = HeaderFor(body.size());
    c.corrupt(h);
    WriteRecord(0, h, body);
    Publish(sizeof(FrameHeader) + body.size() * 8);
    ExpectPollFails(c.what);
  }
}

// A header that claims more body (or inline bulk) than was published.
TEST_F(HostileShm, RecordLongerThanPublished) {
  Build();
  WriteRecord(0, HeaderFor(100));
  Publish(sizeof(FrameHeader) + 8);
  ExpectPollFails("body beyond head");

  Build();
  auto body = PingBody();
  WriteRecord(0, HeaderFor(body.size(), /*inline bulk*/ 60000), body);
  Publish(sizeof(FrameHeader) + body.size() * 8 + 64);
  ExpectPollFails("inline bulk beyond head");

  Build();
  WriteRecord(0, HeaderFor(kMaxBodyWords));  // 8 MiB of body in a 2 MiB ring
  Publish(g().ring_bytes);
  ExpectPollFails("body larger than the ring");
}

// A record that would run past the end of the ring (a well-behaved producer wraps first).
TEST_F(HostileShm, RecordAcrossTheRingEnd) {
  uint64_t start = 0;
  Build([&](Segment& s) {
    start = s.geometry().ring_bytes - 64;
    s.control()->request_ring.tail.store(start);
    s.control()->request_ring.head.store(start);
  });
  WriteRecord(start, HeaderFor(16));  // 32 + 128 bytes from 64 bytes before the end
  Publish(start + 256);
  ExpectPollFails("record across the end");
}

TEST_F(HostileShm, TruncatedHeaderAtTheRingEnd) {
  uint64_t start = 0;
  Build([&](Segment& s) {
    start = s.geometry().ring_bytes - 8;
    s.control()->request_ring.tail.store(start);
    s.control()->request_ring.head.store(start);
  });
  std::memset(ring_data() + start, 0x11, 8);
  Publish(start + 64);
  ExpectPollFails("header split by the ring end");
}

TEST_F(HostileShm, WrapMarkerSkippingUnpublishedBytes) {
  uint64_t start = 0;
  Build([&](Segment& s) {
    start = s.geometry().ring_bytes - 64;
    s.control()->request_ring.tail.store(start);
    s.control()->request_ring.head.store(start);
  });
  std::memcpy(ring_data() + start, &shm::kWrapMarker, sizeof(shm::kWrapMarker));
  Publish(start + 32);  // the marker says "skip 64" but only 32 were published
  ExpectPollFails("wrap marker beyond head");
}

// A proper wrap marker is followed correctly (control for the case above).
TEST_F(HostileShm, ProperWrapMarkerIsFollowed) {
  uint64_t start = 0;
  Build([&](Segment& s) {
    start = s.geometry().ring_bytes - 64;
    s.control()->request_ring.tail.store(start);
    s.control()->request_ring.head.store(start);
  });
  std::memcpy(ring_data() + start, &shm::kWrapMarker, sizeof(shm::kWrapMarker));
  auto body = PingBody();
  WriteRecord(0, HeaderFor(body.size()), body);
  Publish(start + 64 + sizeof(FrameHeader) + body.size() * 8);
  auto f = executor_->Poll();
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_TRUE(f->has_value());
}

// Staged bulk: slot lengths come from the client and are checked.
TEST_F(HostileShm, CorruptStagingSlotLengths) {
  const uint64_t total = 1 << 20;  // staged (above the inline limit), one slot's worth
  struct Case {
    const char* what;
    uint64_t bytes;
  } cases[] = {
      {"longer than a slot", shm::kDefaultSlotBytes + 1},
      {"empty slot", 0},
      {"more than the frame's bulk", total + 4096},
      {"absurd", ~0ull},
  };
  auto body = PingBody();
  for (const Case& c : cases) {
    Build();
    WriteRecord(0, HeaderFor(body.size(), total), body);
    Publish(sizeof(FrameHeader) + body.size() * 8);
    auto f = executor_->Poll();
    ASSERT_TRUE(f.ok() && f->has_value()) << c.what << ": " << f.status().ToString();
    client_.control()->request_slots[0].bytes.store(c.bytes);
    client_.control()->request_slots[0].full.store(1);
    auto chunk = executor_->PollBulkChunk();
    ASSERT_FALSE(chunk.ok()) << c.what << ": a corrupt slot length was accepted";
    EXPECT_EQ(chunk.status().code(), Err::kInvalidValue) << c.what;
  }
}

// ---- Segment::Attach ---------------------------------------------------------------

Fd MakeMemfd(uint64_t size, const shm::Header* header, int seals) {
  Fd fd(static_cast<int>(::syscall(SYS_memfd_create, "hostile", MFD_CLOEXEC | MFD_ALLOW_SEALING)));
  EXPECT_TRUE(fd.valid());
  EXPECT_EQ(::ftruncate(fd.get(), static_cast<off_t>(size)), 0);
  if (header != nullptr) { EXPECT_EQ(::pwrite(fd.get(), header, sizeof(*header), 0), static_cast<ssize_t>(sizeof(*header))); }
  if (seals != 0) { EXPECT_EQ(::fcntl(fd.get(), F_ADD_SEALS, seals), 0); }
  return fd;
}

constexpr int kAllSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

shm::Header HeaderOf(const Geometry& g) {
  return shm::Header{shm::kMagic, shm::kVersion, g.slots, g.ring_bytes, g.slot_bytes, g.inline_bulk, g.total_bytes()};
}

TEST(SegmentAttach, AcceptsAWellFormedSealedSegment) {
  Geometry g;
  g.ring_bytes = 64 << 10;
  g.slot_bytes = 64 << 10;
  g.slots = 1;
  g.inline_bulk = 16 << 10;
  shm::Header h = HeaderOf(g);
  auto seg = Segment::Attach(MakeMemfd(g.total_bytes(), &h, kAllSeals));
  ASSERT_TRUE(seg.ok()) << seg.status().ToString();
  EXPECT_EQ(seg->geometry().ring_bytes, g.ring_bytes);
  EXPECT_EQ(seg->geometry().slots, 1u);
  EXPECT_EQ(seg->size(), g.total_bytes());

  auto created = Segment::Create(Geometry());
  ASSERT_TRUE(created.ok());
  auto attached = Segment::Attach(Fd(::fcntl(created->fd(), F_DUPFD_CLOEXEC, 0)));
  ASSERT_TRUE(attached.ok()) << "what Segment::Create makes, Attach takes: " << attached.status().ToString();
}

void ExpectRejected(Result<Segment> r, const char* what, const char* words = nullptr) {
  ASSERT_FALSE(r.ok()) << what << " was attached";
  EXPECT_EQ(r.status().code(), Err::kInvalidValue) << what;
  if (words) { EXPECT_NE(r.status().message().find(words), std::string::npos) << what << ": " << r.status().message(); }
}

// A segment the client could shrink would SIGBUS the worker on access.
TEST(SegmentAttach, RejectsUnsealedSegments) {
  Geometry g;
  shm::Header h = HeaderOf(g);
  ExpectRejected(Segment::Attach(MakeMemfd(g.total_bytes(), &h, 0)), "unsealed memfd", "sealed");
  ExpectRejected(Segment::Attach(MakeMemfd(g.total_bytes(), &h, F_SEAL_GROW | F_SEAL_SEAL)), "shrinkable memfd", "sealed");
  ExpectRejected(Segment::Attach(MakeMemfd(g.total_bytes(), &h, F_SEAL_SHRINK)), "seals still changeable", "sealed");
  // Not a memfd at all.
  test::TempDir dir;
  Fd file(::open(dir.File("seg").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  ASSERT_TRUE(file.valid());
  ASSERT_EQ(::ftruncate(file.get(), static_cast<off_t>(g.total_bytes())), 0);
  ASSERT_EQ(::pwrite(file.get(), &h, sizeof(h), 0), static_cast<ssize_t>(sizeof(h)));
  ExpectRejected(Segment::Attach(std::move(file)), "regular file");
}

TEST(SegmentAttach, RejectsTooSmallSegments) {
  shm::Header h = HeaderOf(Geometry());
  ExpectRejected(Segment::Attach(MakeMemfd(4096, &h, kAllSeals)), "4 KiB segment", "too small");
  ExpectRejected(Segment::Attach(MakeMemfd(0, nullptr, kAllSeals)), "empty segment", "too small");
  // The header's geometry is self-consistent but the file is smaller than it says: mapping
  // it would fault past the end of the file.
  Geometry big;
  big.ring_bytes = 64 << 20;
  shm::Header hb = HeaderOf(big);
  ExpectRejected(Segment::Attach(MakeMemfd(Geometry().total_bytes(), &hb, kAllSeals)), "file shorter than its geometry");
}

TEST(SegmentAttach, RejectsBadMagicVersionAndTotals) {
  Geometry g;
  shm::Header h = HeaderOf(g);
  h.magic = 0x4141414141414141ull;
  ExpectRejected(Segment::Attach(MakeMemfd(g.total_bytes(), &h, kAllSeals)), "bad magic", "magic");
  h = HeaderOf(g);
  h.version = shm::kVersion + 1;
  ExpectRejected(Segment::Attach(MakeMemfd(g.total_bytes(), &h, kAllSeals)), "bad version");
  h = HeaderOf(g);
  h.total_bytes += 4096;
  ExpectRejected(Segment::Attach(MakeMemfd(g.total_bytes() + 4096, &h, kAllSeals)), "total that disagrees with geometry");
  ExpectRejected(Segment::Attach(MakeMemfd(g.total_bytes(), nullptr, kAllSeals)), "all-zero header");
}

TEST(SegmentAttach, RejectsBadGeometry) {
  struct Case {
    const char* what;
    std::function<void(Geometry&)> bend;
  } cases[] = {
      {"ring not a power of two", [](Geometry& g) { g.ring_bytes = 3 << 20; }},
      {"ring too small", [](Geometry& g) { g.ring_bytes = 32 << 10; }},
      {"ring too large", [](Geometry& g) { g.ring_bytes = 128 << 20; }},
      {"no slots", [](Geometry& g) { g.slots = 0; }},
      {"too many slots", [](Geometry& g) { g.slots = shm::kMaxSlots + 1; }},
      {"slot not page-sized", [](Geometry& g) { g.slot_bytes = (4 << 20) + 8; }},
      {"slot too small", [](Geometry& g) { g.slot_bytes = 4096; }},
      {"inline larger than a quarter ring", [](Geometry& g) { g.inline_bulk = g.ring_bytes / 2; }},
      {"inline not word-aligned", [](Geometry& g) { g.inline_bulk = 1001; }},
  };
  for (const Case& c : cases) {
    Geometry g;
    c.bend(g);
    shm::Header h = HeaderOf(g);  // total_bytes consistent with the bent geometry
    uint64_t size = std::min<uint64_t>(g.total_bytes(), 256u << 20);
    ExpectRejected(Segment::Attach(MakeMemfd(std::max<uint64_t>(size, shm::kControlBytes), &h, kAllSeals)), c.what);
  }
}

// F13 (docs/SECURITY.md): the worker decodes a request from a private copy. A client that
// rewrites the body in the ring after the worker took the frame (between a check and a use
// of the same field) changes nothing the worker sees.
TEST_F(HostileShm, TheBodyIsAPrivateCopy) {
  Build();
  std::vector<uint64_t> body = PingBody();
  WriteRecord(0, HeaderFor(body.size()), body);
  Publish(AlignUp(sizeof(FrameHeader) + body.size() * 8, 8));
  auto f = executor_->Poll();
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_TRUE(f->has_value());
  std::vector<uint64_t> seen((*f)->body.begin(), (*f)->body.end());
  // The client overwrites the record in its ring while the worker holds the frame.
  std::memset(ring_data() + sizeof(FrameHeader), 0xff, body.size() * 8);
  EXPECT_EQ(std::vector<uint64_t>((*f)->body.begin(), (*f)->body.end()), seen);
  EXPECT_NE(reinterpret_cast<const std::byte*>((*f)->body.data()), ring_data() + sizeof(FrameHeader))
      << "the frame body points into memory the client can write";
}

}  // namespace
}  // namespace remora
