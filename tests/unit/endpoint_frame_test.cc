// protocol/: server URLs (ParseEndpoint / Endpoint::ToUrl) and frame header validation.
#include <gtest/gtest.h>

#include "remora/protocol/frame.h"
#include "remora/protocol/transport.h"

namespace remora {
namespace {

TEST(ParseEndpoint, ShmTakesAnAbsoluteSocketPath) {
  auto ep = ParseEndpoint("shm:///run/remora/remora.sock");
  ASSERT_TRUE(ep.ok()) << ep.status().ToString();
  EXPECT_EQ(ep->kind, TransportKind::kShm);
  EXPECT_EQ(ep->path, "/run/remora/remora.sock");
  EXPECT_EQ(ep->ToUrl(), "shm:///run/remora/remora.sock");
}

TEST(ParseEndpoint, ShmRejectsRelativeEmptyAndOverlongPaths) {
  for (const char* url : {"shm://relative.sock", "shm://", "shm://./x.sock", "shm://run/x.sock"}) {
    auto ep = ParseEndpoint(url);
    EXPECT_FALSE(ep.ok()) << url;
    if (!ep.ok()) { EXPECT_EQ(ep.status().code(), Err::kInvalidValue) << url; }
  }
  // sockaddr_un holds 108 bytes including the terminator.
  std::string long_path = "shm:///" + std::string(107, 'x');
  EXPECT_FALSE(ParseEndpoint(long_path).ok());
  std::string fits = "shm:///" + std::string(100, 'x');
  EXPECT_TRUE(ParseEndpoint(fits).ok());
}

TEST(ParseEndpoint, TcpAndRdmaTakeHostAndPort) {
  auto t = ParseEndpoint("tcp://10.0.0.2:7070");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->kind, TransportKind::kTcp);
  EXPECT_EQ(t->host, "10.0.0.2");
  EXPECT_EQ(t->port, 7070);

  auto r = ParseEndpoint("rdma://gpu-host.example:18515");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->kind, TransportKind::kRdma);
  EXPECT_EQ(r->host, "gpu-host.example");
  EXPECT_EQ(r->port, 18515);

  auto zero = ParseEndpoint("tcp://127.0.0.1:0");  // "any port" for listeners
  ASSERT_TRUE(zero.ok());
  EXPECT_EQ(zero->port, 0);
  auto max = ParseEndpoint("tcp://h:65535");
  ASSERT_TRUE(max.ok());
  EXPECT_EQ(max->port, 65535);
}

TEST(ParseEndpoint, Ipv6HostsGoInBrackets) {
  auto ep = ParseEndpoint("tcp://[::1]:7070");
  ASSERT_TRUE(ep.ok()) << ep.status().ToString();
  EXPECT_EQ(ep->host, "::1");
  EXPECT_EQ(ep->port, 7070);
  EXPECT_EQ(ep->ToUrl(), "tcp://[::1]:7070");

  auto ll = ParseEndpoint("rdma://[fe80::1:2]:1");
  ASSERT_TRUE(ll.ok());
  EXPECT_EQ(ll->host, "fe80::1:2");
  EXPECT_EQ(ll->ToUrl(), "rdma://[fe80::1:2]:1");
}

TEST(ParseEndpoint, RejectsBadSchemesHostsAndPorts) {
  for (const char* url : {
           "", "remora.sock", "/run/remora.sock", "http://h:1", "TCP://h:1", "udp://h:1",
           "tcp://host",           // missing port
           "tcp://host:",          // empty port
           "tcp://:7070",          // missing host
           "tcp://host:70000",     // port out of range
           "tcp://host:-1", "tcp://host:12ab", "tcp://host:0x10", "tcp://host: 80",
           "tcp://[::1]",          // bracketed host without port
           "tcp://[::1]7070",      // no colon after the bracket
           "tcp://[::1:7070",      // unclosed bracket
           "tcp://[]:7070",        // empty bracketed host
           "rdma://host",
           // characters no host has (fuzz target parse: "[[2" printed back as "[2")
           "rdma://[[2]:5", "tcp://a]:5", "tcp://a[b:5", "tcp://h/x:1", "tcp://u@h:1", "tcp://h h:1",
           "tcp://[::1\n]:1", "tcp://h\t:1",
       }) {
    auto ep = ParseEndpoint(url);
    EXPECT_FALSE(ep.ok()) << "'" << url << "' was accepted";
    if (!ep.ok()) { EXPECT_EQ(ep.status().code(), Err::kInvalidValue) << url; }
  }
}

// An IPv6 address without brackets is ambiguous ("::1:7070" is itself an address) and is
// refused with a hint, rather than split at its last colon.
TEST(ParseEndpoint, UnbracketedIpv6IsRefused) {
  for (const char* url : {"tcp://::1", "tcp://fe80::1", "rdma://fe80::1:2", "tcp://::1:7070"}) {
    auto ep = ParseEndpoint(url);
    EXPECT_FALSE(ep.ok()) << url << " parsed as host '" << (ep.ok() ? ep->host : "") << "' port "
                          << (ep.ok() ? ep->port : 0);
  }
}

// Whatever ToUrl prints parses back to the same endpoint.
TEST(ParseEndpoint, ToUrlRoundTrips) {
  for (const char* url : {"shm:///tmp/a.sock", "tcp://127.0.0.1:1", "tcp://[::1]:65535",
                          "rdma://10.1.2.3:18515", "tcp://gpu-7:7070"}) {
    auto ep = ParseEndpoint(url);
    ASSERT_TRUE(ep.ok()) << url;
    EXPECT_EQ(ep->ToUrl(), url);
    auto again = ParseEndpoint(ep->ToUrl());
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again->kind, ep->kind);
    EXPECT_EQ(again->host, ep->host);
    EXPECT_EQ(again->port, ep->port);
    EXPECT_EQ(again->path, ep->path);
  }
}

FrameHeader GoodHeader() {
  FrameHeader h;
  h.kind = static_cast<uint16_t>(FrameKind::kRequest);
  h.body_words = 4;
  h.tag = 99;
  h.bulk_bytes = 1 << 20;
  return h;
}

TEST(ValidateFrameHeader, AcceptsWellFormedHeaders) {
  EXPECT_TRUE(ValidateFrameHeader(GoodHeader()).ok());
  for (FrameKind k : {FrameKind::kHandshake, FrameKind::kRequest, FrameKind::kReply, FrameKind::kNotice, FrameKind::kHeartbeat}) {
    FrameHeader h = GoodHeader();
    h.kind = static_cast<uint16_t>(k);
    EXPECT_TRUE(ValidateFrameHeader(h).ok());
  }
  FrameHeader h = GoodHeader();
  h.body_words = kMaxBodyWords;
  h.bulk_bytes = kMaxBulkBytes;
  EXPECT_TRUE(ValidateFrameHeader(h).ok()) << "the limits themselves are allowed";
}

TEST(ValidateFrameHeader, RejectsWhatAWellBehavedPeerNeverSends) {
  auto rejects = [](FrameHeader h, const char* what) {
    Status st = ValidateFrameHeader(h);
    EXPECT_FALSE(st.ok()) << what;
    EXPECT_EQ(st.code(), Err::kInvalidValue) << what;
  };
  FrameHeader h = GoodHeader();
  h.magic = 0x32524d52;  // "RMR2"
  rejects(h, "bad magic");
  h = GoodHeader();
  h.magic = 0;
  rejects(h, "zero magic");
  for (uint16_t kind : {0, 6, 0xffff}) {
    h = GoodHeader();
    h.kind = kind;
    rejects(h, "unknown kind");
  }
  h = GoodHeader();
  h.reserved = 1;
  rejects(h, "reserved bits");
  h = GoodHeader();
  h.body_words = 0;
  rejects(h, "empty body");
  h = GoodHeader();
  h.body_words = kMaxBodyWords + 1;
  rejects(h, "oversize body");
  h = GoodHeader();
  h.bulk_bytes = kMaxBulkBytes + 1;
  rejects(h, "oversize bulk");
  h = GoodHeader();
  h.bulk_bytes = UINT64_MAX;
  rejects(h, "absurd bulk");
}

TEST(ValidateFrameHeader, BadMagicMessageSaysWhy) {
  FrameHeader h = GoodHeader();
  h.magic = 0x50545448;  // "HTTP"
  Status st = ValidateFrameHeader(h);
  EXPECT_NE(st.message().find("magic"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace remora
