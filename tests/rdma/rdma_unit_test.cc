// Host-side tests of the RDMA transport's pieces that need no RDMA device: the wire formats
// (bootstrap message, connection private data, frame records), the registration cache, the
// staging pool, and how rdma:// behaves on a machine without RDMA (refused with a reason,
// never a hang). The transport itself is tested inside the Soft-RoCE VM (rdma_transport_test).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

#include <cstring>
#include <memory>
#include <thread>

#include "rdma/reg_cache.h"
#include "rdma/staging_pool.h"
#include "rdma/wire.h"
#include "remora/base/util.h"
#include "remora/protocol/frame_socket.h"
#include "remora/protocol/transport.h"
#include "tcp/tcp_connection.h"
#include "transport_internal.h"

namespace remora::rdma {
namespace {

sockaddr_storage V4(const char* ip, uint16_t port) {
  sockaddr_storage ss{};
  auto* a = reinterpret_cast<sockaddr_in*>(&ss);
  a->sin_family = AF_INET;
  a->sin_port = htons(port);
  inet_pton(AF_INET, ip, &a->sin_addr);
  return ss;
}

TEST(RdmaWire, BootstrapRoundTripsIPv4) {
  Bootstrap b;
  b.address = V4("10.77.0.1", 40123);
  for (size_t i = 0; i < b.secret.size(); i++) b.secret[i] = static_cast<uint8_t>(i * 7 + 1);
  std::vector<std::byte> enc = EncodeBootstrap(b);
  ASSERT_EQ(enc.size(), kBootstrapFixedBytes);
  Bootstrap d;
  Result<size_t> msg = DecodeBootstrapFixed(enc, &d);
  ASSERT_TRUE(msg.ok()) << msg.status().ToString();
  EXPECT_EQ(*msg, 0u);
  EXPECT_EQ(d.status, Err::kSuccess);
  EXPECT_EQ(d.secret, b.secret);
  auto* a = reinterpret_cast<sockaddr_in*>(&d.address);
  EXPECT_EQ(a->sin_family, AF_INET);
  EXPECT_EQ(ntohs(a->sin_port), 40123);
  char text[32];
  EXPECT_STREQ(inet_ntop(AF_INET, &a->sin_addr, text, sizeof(text)), "10.77.0.1");
}

TEST(RdmaWire, BootstrapRoundTripsIPv6AndErrors) {
  Bootstrap b;
  auto* a6 = reinterpret_cast<sockaddr_in6*>(&b.address);
  a6->sin6_family = AF_INET6;
  a6->sin6_port = htons(7);
  inet_pton(AF_INET6, "fe80::1:2", &a6->sin6_addr);
  Bootstrap d;
  std::vector<std::byte> enc = EncodeBootstrap(b);
  ASSERT_TRUE(DecodeBootstrapFixed(enc, &d).ok());
  EXPECT_EQ(std::memcmp(&reinterpret_cast<sockaddr_in6*>(&d.address)->sin6_addr, &a6->sin6_addr, 16), 0);

  Bootstrap refusal;
  refusal.status = Err::kNotSupported;
  refusal.message = "no RDMA device (ibv_get_device_list: Function not implemented)";
  enc = EncodeBootstrap(refusal);
  Result<size_t> msg = DecodeBootstrapFixed(enc, &d);
  ASSERT_TRUE(msg.ok());
  EXPECT_EQ(d.status, Err::kNotSupported);
  ASSERT_EQ(*msg, refusal.message.size());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(enc.data() + kBootstrapFixedBytes), *msg), refusal.message);
}

TEST(RdmaWire, BootstrapRejectsGarbage) {
  Bootstrap d;
  Bootstrap b;
  b.address = V4("1.2.3.4", 5);
  std::vector<std::byte> enc = EncodeBootstrap(b);
  EXPECT_EQ(DecodeBootstrapFixed(ConstBytes(enc).first(63), &d).status().code(), Err::kInvalidValue);
  std::vector<std::byte> bad = enc;
  bad[0] = std::byte{'X'};
  EXPECT_EQ(DecodeBootstrapFixed(bad, &d).status().code(), Err::kInvalidValue);
  bad = enc;
  bad[4] = std::byte{9};  // version
  EXPECT_EQ(DecodeBootstrapFixed(bad, &d).status().code(), Err::kNotSupported);
  bad = enc;
  bad[6] = std::byte{77};  // address family
  EXPECT_EQ(DecodeBootstrapFixed(bad, &d).status().code(), Err::kInvalidValue);
  bad = enc;
  bad[11] = std::byte{0xff};  // message length
  EXPECT_EQ(DecodeBootstrapFixed(bad, &d).status().code(), Err::kInvalidValue);
}

TEST(RdmaWire, ConnectDataRoundTripsAndValidates) {
  ConnectData c;
  c.secret[3] = 42;
  c.recv_slots = 64;
  c.slot_bytes = 16384;
  auto enc = EncodeConnectData(c);
  static_assert(enc.size() <= 56, "must fit the private data of an RC connect");
  // The CM may hand the data back padded.
  std::vector<std::byte> padded(enc.begin(), enc.end());
  padded.resize(56);
  Result<ConnectData> d = DecodeConnectData(padded.data(), padded.size());
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->secret, c.secret);
  EXPECT_EQ(d->recv_slots, 64u);
  EXPECT_EQ(d->slot_bytes, 16384u);
  EXPECT_FALSE(DecodeConnectData(nullptr, 0).ok());
  EXPECT_FALSE(DecodeConnectData(enc.data(), 31).ok());
  c.slot_bytes = 100;  // not a multiple of 64, below the minimum
  enc = EncodeConnectData(c);
  EXPECT_FALSE(DecodeConnectData(enc.data(), enc.size()).ok());
  c.slot_bytes = 4096;
  c.recv_slots = 1;
  enc = EncodeConnectData(c);
  EXPECT_FALSE(DecodeConnectData(enc.data(), enc.size()).ok());
}

// Builds a record the way the sender does: prefix, body, embedded bulk.
std::vector<uint64_t> BuildRecord(const FrameHeader& h, uint8_t flags, const BulkDesc* src, const BulkDesc* reply,
                                  std::span<const uint64_t> body, ConstBytes bulk) {
  RecordPrefix p = MakeRecordPrefix(h, flags, src, reply);
  uint64_t total = RecordBytes(h, flags);
  std::vector<uint64_t> rec((total + 7) / 8);
  auto* out = reinterpret_cast<std::byte*>(rec.data());
  std::memcpy(out, p.bytes.data(), p.size);
  if (!body.empty()) std::memcpy(out + p.size, body.data(), body.size_bytes());
  if (!bulk.empty()) std::memcpy(out + p.size + body.size_bytes(), bulk.data(), bulk.size());  // (never from null)
  EXPECT_EQ(p.size + body.size_bytes() + bulk.size(), total);
  return rec;
}

TEST(RdmaWire, RecordsRoundTrip) {
  std::vector<uint64_t> body = {1, 2, 3};
  OutFrame f;
  f.kind = FrameKind::kRequest;
  f.flags = kFlagExpectsReply;
  f.tag = 99;
  f.body = body;

  // Embedded bulk.
  std::vector<std::byte> bulk(13, std::byte{0x5a});
  FrameHeader h = MakeFrameHeader(f, bulk.size());
  auto rec = BuildRecord(h, kEmbeddedBulk, nullptr, nullptr, body, bulk);
  ConstBytes bytes(reinterpret_cast<const std::byte*>(rec.data()), RecordBytes(h, kEmbeddedBulk));
  Result<ParsedRecord> r = ParseRecord(kEmbeddedBulk, bytes);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->header.tag, 99u);
  EXPECT_EQ(r->header.flags, kFlagExpectsReply);
  ASSERT_EQ(r->body.size(), 3u);
  EXPECT_EQ(r->body[2], 3u);
  ASSERT_EQ(r->embedded.size(), 13u);
  EXPECT_EQ(r->embedded[12], std::byte{0x5a});
  EXPECT_FALSE(r->source || r->reply);

  // Remote source and reply target.
  BulkDesc src{0x1000, 77, 0, 1 << 20}, reply{0x2000, 88, 0, 4096};
  h = MakeFrameHeader(f, 1 << 20);
  uint8_t flags = kSourceWhole | kReplyTarget;
  rec = BuildRecord(h, flags, &src, &reply, body, {});
  r = ParseRecord(flags, ConstBytes(reinterpret_cast<const std::byte*>(rec.data()), RecordBytes(h, flags)));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->source && r->reply);
  EXPECT_EQ(r->source->rkey, 77u);
  EXPECT_EQ(r->source->length, 1u << 20);
  EXPECT_EQ(r->reply->addr, 0x2000u);
  EXPECT_EQ(r->body[0], 1u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(r->body.data()) % 8, 0u);

  // Segments announced later; no bulk at all.
  h = MakeFrameHeader(f, 5 << 20);
  rec = BuildRecord(h, kSourceSegments, nullptr, nullptr, body, {});
  EXPECT_TRUE(ParseRecord(kSourceSegments, ConstBytes(reinterpret_cast<const std::byte*>(rec.data()), RecordBytes(h, kSourceSegments))).ok());
  h = MakeFrameHeader(f, 0);
  rec = BuildRecord(h, 0, nullptr, nullptr, body, {});
  EXPECT_TRUE(ParseRecord(0, ConstBytes(reinterpret_cast<const std::byte*>(rec.data()), RecordBytes(h, 0))).ok());
}

TEST(RdmaWire, RecordsRejectMalformedInput) {
  std::vector<uint64_t> body = {7};
  OutFrame f;
  f.body = body;
  auto parse = [](uint8_t flags, const std::vector<uint64_t>& rec, size_t bytes) {
    return ParseRecord(flags, ConstBytes(reinterpret_cast<const std::byte*>(rec.data()), bytes)).status().code();
  };
  FrameHeader h = MakeFrameHeader(f, 0);
  auto rec = BuildRecord(h, 0, nullptr, nullptr, body, {});
  EXPECT_EQ(parse(0, rec, 16), Err::kInvalidValue);                  // truncated
  EXPECT_EQ(parse(0, rec, RecordBytes(h, 0) - 8), Err::kInvalidValue);  // body cut
  EXPECT_EQ(parse(kEmbeddedBulk, rec, RecordBytes(h, 0)), Err::kInvalidValue);  // bulk flag, no bulk
  EXPECT_EQ(parse(0x80, rec, RecordBytes(h, 0)), Err::kInvalidValue);           // unknown flag
  h = MakeFrameHeader(f, 100);
  rec = BuildRecord(h, kEmbeddedBulk, nullptr, nullptr, body, std::vector<std::byte>(100));
  EXPECT_EQ(parse(0, rec, RecordBytes(h, kEmbeddedBulk)), Err::kInvalidValue);  // bulk, no flag
  EXPECT_EQ(parse(kEmbeddedBulk | kSourceSegments, rec, RecordBytes(h, kEmbeddedBulk)), Err::kInvalidValue);
  BulkDesc src{1, 2, 0, 99};  // length differs from bulk_bytes
  rec = BuildRecord(h, kSourceWhole, &src, nullptr, body, {});
  EXPECT_EQ(parse(kSourceWhole, rec, RecordBytes(h, kSourceWhole)), Err::kInvalidValue);
  h.magic = 0;
  rec = BuildRecord(h, 0, nullptr, nullptr, body, {});
  EXPECT_EQ(parse(0, rec, RecordBytes(h, 0)), Err::kInvalidValue);
}

// A move-only stand-in for an MR that counts deregistrations.
struct FakeMr {
  int id = 0;
  int* deregistered = nullptr;
  FakeMr(int i, int* d) : id(i), deregistered(d) {}
  FakeMr(FakeMr&& o) noexcept : id(o.id), deregistered(std::exchange(o.deregistered, nullptr)) {}
  FakeMr& operator=(FakeMr&& o) noexcept {
    id = o.id;
    deregistered = std::exchange(o.deregistered, nullptr);
    return *this;
  }
  ~FakeMr() {
    if (deregistered != nullptr) ++*deregistered;
  }
};

TEST(RdmaRegistrationCache, FindsCoveringRangesOnly) {
  int dereg = 0;
  RegistrationCache<FakeMr> cache;
  alignas(64) static char mem[1 << 16];
  ASSERT_TRUE(cache.Insert(mem + 4096, 8192, FakeMr(1, &dereg)).ok());
  ASSERT_TRUE(cache.Insert(mem + 16384, 100, FakeMr(2, &dereg)).ok());
  EXPECT_EQ(cache.size(), 2u);
  const auto* e = cache.Find(mem + 4096, 8192);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->handle.id, 1);
  ASSERT_NE(cache.Find(mem + 5000, 10), nullptr);
  EXPECT_EQ(cache.Find(mem + 5000, 10)->handle.id, 1);
  EXPECT_EQ(cache.Find(mem + 4095, 2), nullptr);         // starts before
  EXPECT_EQ(cache.Find(mem + 12287, 2), nullptr);        // runs past the end
  EXPECT_EQ(cache.Find(mem + 12288, 1), nullptr);        // the gap
  EXPECT_EQ(cache.Find(mem + 16384 + 99, 1)->handle.id, 2);
  EXPECT_EQ(cache.Find(mem + 16384, 0), nullptr);        // empty never matches
  EXPECT_EQ(cache.hits(), 4u);
  EXPECT_EQ(cache.misses(), 4u);
  EXPECT_EQ(dereg, 0);
}

TEST(RdmaRegistrationCache, RefusesOverlapsAndReleasesHandles) {
  int dereg = 0;
  RegistrationCache<FakeMr> cache;
  alignas(64) static char mem[1 << 16];
  ASSERT_TRUE(cache.Insert(mem + 1000, 1000, FakeMr(1, &dereg)).ok());
  EXPECT_EQ(cache.Insert(mem + 1500, 10, FakeMr(2, &dereg)).code(), Err::kHostMemoryAlreadyRegistered);
  EXPECT_EQ(cache.Insert(mem + 500, 501, FakeMr(3, &dereg)).code(), Err::kHostMemoryAlreadyRegistered);
  EXPECT_EQ(cache.Insert(mem + 1999, 5, FakeMr(4, &dereg)).code(), Err::kHostMemoryAlreadyRegistered);
  EXPECT_EQ(dereg, 3);  // the refused handles were released
  EXPECT_TRUE(cache.Insert(mem + 500, 500, FakeMr(5, &dereg)).ok());   // adjacent below
  EXPECT_TRUE(cache.Insert(mem + 2000, 500, FakeMr(6, &dereg)).ok());  // adjacent above
  EXPECT_EQ(cache.Insert(mem, 0, FakeMr(7, &dereg)).code(), Err::kInvalidValue);
  EXPECT_EQ(dereg, 4);
  EXPECT_FALSE(cache.Erase(mem + 1001).has_value());
  {
    std::optional<FakeMr> h = cache.Erase(mem + 1000);
    ASSERT_TRUE(h.has_value());
    EXPECT_EQ(h->id, 1);
  }
  EXPECT_EQ(dereg, 5);
  EXPECT_EQ(cache.Find(mem + 1500, 1), nullptr);
  EXPECT_EQ(cache.Clear().size(), 2u);
  EXPECT_EQ(dereg, 7);
  EXPECT_EQ(cache.size(), 0u);
}

struct FakeBuffer {
  size_t bytes = 0;
  std::shared_ptr<int> live;  // counts buffers in existence
  size_t size() const { return bytes; }
};

TEST(RdmaStagingPool, ReusesByClassAndRespectsTheCap) {
  auto live = std::make_shared<int>(0);
  int made = 0;
  StagingPool<FakeBuffer> pool(1 << 20, 8 << 20, [&](size_t n) -> Result<FakeBuffer> {
    made++;
    return FakeBuffer{n, live};
  });
  EXPECT_EQ((StagingPool<FakeBuffer>::ClassBytes(1, 1 << 20)), 1u << 20);
  EXPECT_EQ((StagingPool<FakeBuffer>::ClassBytes((1 << 20) + 1, 1 << 20)), 2u << 20);
  auto a = pool.Take(100);
  ASSERT_TRUE(a.ok() && a->has_value());
  EXPECT_EQ((*a)->size(), 1u << 20);
  pool.Give(std::move(**a));
  auto b = pool.Take(1 << 20);  // same class: reused
  ASSERT_TRUE(b.ok() && b->has_value());
  EXPECT_EQ(made, 1);
  auto c = pool.Take(5 << 20);  // 8 MiB class: 1 + 8 > 8 MiB cap and nothing idle to drop
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->has_value());
  pool.Give(std::move(**b));
  c = pool.Take(5 << 20);  // the idle 1 MiB buffer is dropped to make room
  ASSERT_TRUE(c.ok() && c->has_value());
  EXPECT_EQ((*c)->size(), 8u << 20);
  EXPECT_EQ(pool.allocated_bytes(), 8u << 20);
  EXPECT_EQ(made, 2);
  EXPECT_FALSE(pool.Take(9 << 20)->has_value());  // larger than the cap
  auto d = pool.Take(1);
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->has_value());  // the cap is taken by the 8 MiB buffer
}

TEST(RdmaStagingPool, FactoryErrorsPropagate) {
  StagingPool<FakeBuffer> pool(4096, 1 << 20, [](size_t) -> Result<FakeBuffer> {
    return Error(Err::kMemoryAllocation, "no memory");
  });
  EXPECT_EQ(pool.Take(1).status().code(), Err::kMemoryAllocation);
  EXPECT_EQ(pool.allocated_bytes(), 0u);
}

// ---- rdma:// on a host without RDMA ----------------------------------------------------

bool HostHasRdma() { return RdmaUnavailableReason().empty(); }

TEST(RdmaHost, ListenIsRefusedWithTheReason) {
  if (HostHasRdma()) GTEST_SKIP() << "this host has an RDMA device; the VM test covers it";
  std::string reason = RdmaUnavailableReason();
  EXPECT_EQ(reason.find('\n'), std::string::npos);
  Result<Endpoint> ep = ParseEndpoint("rdma://127.0.0.1:0");
  ASSERT_TRUE(ep.ok());
  auto l = Listen(*ep);
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), Err::kNotSupported);
  EXPECT_NE(l.status().message().find(reason), std::string::npos) << l.status().message();
}

// The supervisor side is TCP (as on an RDMA server); the worker's RdmaAdopt cannot set up
// RDMA here and must tell the client why through the bootstrap message.
TEST(RdmaHost, AdoptWithoutADeviceRefusesTheClientCleanly) {
  if (HostHasRdma()) GTEST_SKIP() << "this host has an RDMA device; the VM test covers it";
  Result<Endpoint> ep = ParseEndpoint("tcp://127.0.0.1:0");
  ASSERT_TRUE(ep.ok());
  auto listener = TcpListen(*ep, TransportKind::kRdma);
  ASSERT_TRUE(listener.ok()) << listener.status().ToString();
  uint16_t port = (*listener)->endpoint().port;
  Status adopt_status;
  std::thread server([&] {
    auto pending = (*listener)->Accept();
    ASSERT_TRUE(pending.ok());
    FrameSocket fs(pending->socket.get());
    ServerAuthPolicy policy;
    policy.auth_required = false;
    auto peer = RunServerHandshake(fs, policy, nullptr, 5000);
    ASSERT_TRUE(peer.ok()) << peer.status().ToString();
    SessionInfo info;
    info.session_id = 1;
    ASSERT_TRUE(SendWelcome(fs, *peer, info).ok());
    auto conn = AdoptConnection(TransportKind::kRdma, std::move(pending->socket), {});
    adopt_status = conn.ok() ? Status::Ok() : conn.status();
  });
  Endpoint client_ep = *ParseEndpoint("rdma://127.0.0.1:" + std::to_string(port));
  uint64_t t0 = MonotonicNanos();
  auto c = Connect(client_ep, ConnectOptions{.token = std::nullopt, .timeout_ms = 5000});
  server.join();
  EXPECT_LT(MonotonicNanos() - t0, 3'000'000'000ull);
  ASSERT_FALSE(c.ok());
  EXPECT_FALSE(adopt_status.ok());
  // The client hears the worker's reason (or, without rdma-core, its own).
  EXPECT_TRUE(c.status().code() == Err::kNotSupported || c.status().code() == Err::kDevicesUnavailable) << c.status().ToString();
  EXPECT_NE(c.status().message().find("RDMA"), std::string::npos) << c.status().ToString();
  std::printf("client error: %s\nworker error: %s\n", c.status().ToString().c_str(), adopt_status.ToString().c_str());
}

TEST(RdmaHost, ConnectToNothingFailsFast) {
  // A closed port: the TCP bootstrap connection is refused at once.
  auto l = TcpListen(*ParseEndpoint("tcp://127.0.0.1:0"), TransportKind::kTcp);
  ASSERT_TRUE(l.ok());
  uint16_t port = (*l)->endpoint().port;
  l->reset();
  auto c = Connect(*ParseEndpoint("rdma://127.0.0.1:" + std::to_string(port)), ConnectOptions{.token = std::nullopt, .timeout_ms = 2000});
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(c.status().code() == Err::kDevicesUnavailable || c.status().code() == Err::kNotSupported) << c.status().ToString();
}

}  // namespace
}  // namespace remora::rdma
