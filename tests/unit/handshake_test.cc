// protocol/: the session handshake (Hello -> Challenge -> Proof -> Welcome | Refusal) over a
// unix socketpair, the server side in a thread.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <thread>

#include "remora.capnp.h"
#include "remora/protocol/handshake.h"
#include "remora/protocol/message.h"

namespace remora {
namespace {

constexpr int kTimeoutMs = 5000;

class FakeKeys final : public TenantKeys {
 public:
  std::map<std::string, Key, std::less<>> keys;
  std::optional<Key> StoredKey(std::string_view tenant) override {
    auto it = keys.find(tenant);
    if (it == keys.end()) return std::nullopt;
    return it->second;
  }
};

struct Sockets {
  Fd client, server;
  Sockets() {
    int sv[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    client.reset(sv[0]);
    server.reset(sv[1]);
  }
};

struct Outcome {
  std::optional<Result<SessionInfo>> client;
  std::optional<Result<AuthenticatedPeer>> server;
  std::vector<Fd> hello_fds;
};

SessionInfo WelcomeFor(const AuthenticatedPeer& peer) {
  SessionInfo info;
  info.session_id = 42;
  info.tenant = peer.tenant;
  info.backend = "host-emulated";
  info.emulated = true;
  info.server_name = "unit-server";
  info.driver_version = 13000;
  return info;
}

// Runs both sides; the server sends Welcome when it authenticates the peer.
Outcome Handshake(const ServerAuthPolicy& policy, const std::optional<Token>& token,
                  std::span<const int> client_fds = {}) {
  Sockets s;
  Outcome out;
  std::thread server([&] {
    FrameSocket fs(s.server.get());
    out.server.emplace(RunServerHandshake(fs, policy, &out.hello_fds, kTimeoutMs));
    if (out.server->ok()) { EXPECT_TRUE(SendWelcome(fs, WelcomeFor(**out.server)).ok()); }
  });
  FrameSocket fc(s.client.get());
  out.client.emplace(RunClientHandshake(fc, token, client_fds, kTimeoutMs));
  s.client.reset();  // a client that gave up goes away; the server must notice
  server.join();
  return out;
}

ServerAuthPolicy NoAuth() {
  ServerAuthPolicy p;
  p.auth_required = false;
  p.anonymous_tenant = "local";
  p.server_version = "test";
  return p;
}

class AuthHandshake : public ::testing::Test {
 protected:
  void SetUp() override {
    token.tenant = "alpha";
    token.secret = RandomSecret();
    keys.keys["alpha"] = StoredKeyFor(token.secret);
    policy.auth_required = true;
    policy.keys = &keys;
    policy.server_version = "test";
  }
  FakeKeys keys;
  ServerAuthPolicy policy;
  Token token;
};

// --auth none: every session belongs to the anonymous tenant, whatever the client says.
TEST(Handshake, NoAuthGivesTheAnonymousTenant) {
  Outcome o = Handshake(NoAuth(), std::nullopt);
  ASSERT_TRUE(o.server->ok()) << o.server->status().ToString();
  EXPECT_EQ((*o.server)->tenant, "local");
  EXPECT_EQ((*o.server)->client.pid, static_cast<uint32_t>(getpid()));
  EXPECT_FALSE((*o.server)->shim_version.empty());
  ASSERT_TRUE(o.client->ok()) << o.client->status().ToString();
  const SessionInfo& info = **o.client;
  EXPECT_EQ(info.session_id, 42u);
  EXPECT_EQ(info.tenant, "local");
  EXPECT_EQ(info.backend, "host-emulated");
  EXPECT_TRUE(info.emulated);
  EXPECT_EQ(info.server_name, "unit-server");
  EXPECT_EQ(info.driver_version, 13000);

  Token t;
  t.tenant = "someone";
  t.secret = RandomSecret();
  Outcome o2 = Handshake(NoAuth(), t);
  ASSERT_TRUE(o2.server->ok());
  EXPECT_EQ((*o2.server)->tenant, "local") << "a token does not choose the tenant on an --auth none server";
}

// Descriptors sent with the Hello (the shm segment) arrive on the server side.
TEST(Handshake, DescriptorsTravelWithTheHello) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  Fd rd(p[0]), wr(p[1]);
  int fds[1] = {wr.get()};
  Outcome o = Handshake(NoAuth(), std::nullopt, fds);
  ASSERT_TRUE(o.server->ok());
  ASSERT_EQ(o.hello_fds.size(), 1u);
  ASSERT_EQ(::write(o.hello_fds[0].get(), "x", 1), 1) << "the received descriptor is the pipe's write end";
  char c = 0;
  ASSERT_EQ(::read(rd.get(), &c, 1), 1);
  EXPECT_EQ(c, 'x');
}

TEST_F(AuthHandshake, CorrectTokenIsAccepted) {
  Outcome o = Handshake(policy, token);
  ASSERT_TRUE(o.server->ok()) << o.server->status().ToString();
  EXPECT_EQ((*o.server)->tenant, "alpha");
  ASSERT_TRUE(o.client->ok()) << o.client->status().ToString();
  EXPECT_EQ((*o.client)->tenant, "alpha");
}

TEST_F(AuthHandshake, WrongTokenIsRefusedWithNoDevice) {
  Token wrong = token;
  wrong.secret = RandomSecret();
  Outcome o = Handshake(policy, wrong);
  ASSERT_FALSE(o.client->ok());
  EXPECT_EQ(o.client->status().code(), Err::kNoDevice);
  EXPECT_NE(o.client->status().message().find("authentication failed"), std::string::npos)
      << o.client->status().message();
  EXPECT_NE(o.client->status().message().find("alpha"), std::string::npos);
  ASSERT_FALSE(o.server->ok());
  EXPECT_EQ(o.server->status().code(), Err::kNoDevice);
  EXPECT_NE(o.server->status().message().find("wrong token"), std::string::npos) << o.server->status().message();
}

// An unknown tenant looks exactly like a wrong token to the client (no tenant probing);
// the server's log tells them apart.
TEST_F(AuthHandshake, UnknownTenantIsRefused) {
  Token stranger;
  stranger.tenant = "mallory";
  stranger.secret = RandomSecret();
  Outcome o = Handshake(policy, stranger);
  ASSERT_FALSE(o.client->ok());
  EXPECT_EQ(o.client->status().code(), Err::kNoDevice);
  Token wrong = token;
  wrong.secret = RandomSecret();
  Outcome o2 = Handshake(policy, wrong);
  std::string a = o.client->status().message(), b = o2.client->status().message();
  EXPECT_EQ(a.substr(0, a.find('\'')), b.substr(0, b.find('\''))) << a << " / " << b;
  ASSERT_FALSE(o.server->ok());
  EXPECT_NE(o.server->status().message().find("no such tenant"), std::string::npos) << o.server->status().message();
}

// A client without a token learns from the Challenge that one is required, and says so
// naming the environment variable; the server does not hang on it.
TEST_F(AuthHandshake, MissingTokenNamesRemoraToken) {
  auto start = std::chrono::steady_clock::now();
  Outcome o = Handshake(policy, std::nullopt);
  ASSERT_FALSE(o.client->ok());
  EXPECT_EQ(o.client->status().code(), Err::kNoDevice);
  EXPECT_NE(o.client->status().message().find("REMORA_TOKEN"), std::string::npos) << o.client->status().message();
  ASSERT_FALSE(o.server->ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(kTimeoutMs / 2));
}

// A client that sends a proof without naming a tenant is refused by the server, with a
// message naming REMORA_TOKEN.
TEST_F(AuthHandshake, EmptyTenantIsRefusedByTheServer) {
  Token nameless;
  nameless.secret = RandomSecret();
  Outcome o = Handshake(policy, nameless);
  ASSERT_FALSE(o.client->ok());
  EXPECT_EQ(o.client->status().code(), Err::kNoDevice);
  EXPECT_NE(o.client->status().message().find("REMORA_TOKEN"), std::string::npos) << o.client->status().message();
  ASSERT_FALSE(o.server->ok());
  EXPECT_EQ(o.server->status().code(), Err::kNoDevice);
}

// ---- hand-written peers -------------------------------------------------------------

Status WriteHello(FrameSocket& fs, uint32_t version) {
  ScratchMessage msg;
  auto hello = msg.InitRoot<wire::HandshakeMessage>().initHello();
  hello.setProtocolVersion(version);
  hello.setTenant("");
  Nonce n = RandomNonce();
  hello.setClientNonce(capnp::Data::Reader(n.data(), n.size()));
  OutFrame f;
  f.kind = FrameKind::kHandshake;
  f.body = msg.Flatten();
  return fs.Write(f);
}

// A Refusal read from the server: its error and message.
struct Refusal {
  Err code = Err::kSuccess;
  std::string message;
};

// Reads the server's answer, which must be a Refusal.
Result<Refusal> ReadRefusal(FrameSocket& fs) {
  ASSIGN_OR_RETURN(InFrame f, fs.Read(kTimeoutMs));
  Refusal refusal;
  Status st = GuardDecode("answer", [&]() -> Status {
    BodyReader r(f.body);
    auto m = r.Root<wire::HandshakeMessage>();
    if (!m.isRefusal()) return Error(Err::kUnknown, "not a refusal");
    refusal.code = static_cast<Err>(m.getRefusal().getError());
    refusal.message = m.getRefusal().getMessage().cStr();
    return Status::Ok();
  });
  RETURN_IF_ERROR(st);
  return refusal;
}

// Runs the server side against a hand-written client `peer` (which gets the client socket).
Result<AuthenticatedPeer> ServeAgainst(const ServerAuthPolicy& policy, int timeout_ms,
                                       const std::function<void(FrameSocket&)>& peer) {
  Sockets s;
  std::optional<Result<AuthenticatedPeer>> result;
  std::thread server([&] {
    FrameSocket fs(s.server.get());
    std::vector<Fd> fds;
    result.emplace(RunServerHandshake(fs, policy, &fds, timeout_ms));
    ::shutdown(s.server.get(), SHUT_RDWR);  // the server drops a connection it refused
  });
  FrameSocket fc(s.client.get());
  peer(fc);
  server.join();
  return std::move(*result);
}

TEST(Handshake, ProtocolVersionMismatchIsRefused) {
  Result<Refusal> refusal = Status(Err::kUnknown, "no answer");
  auto r = ServeAgainst(NoAuth(), kTimeoutMs, [&](FrameSocket& fs) {
    ASSERT_TRUE(WriteHello(fs, wire::PROTOCOL_VERSION + 1).ok());
    refusal = ReadRefusal(fs);
  });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Err::kNoDevice);
  ASSERT_TRUE(refusal.ok()) << refusal.status().ToString();
  EXPECT_EQ(refusal->code, Err::kNoDevice);
  EXPECT_NE(refusal->message.find("protocol version " + std::to_string(wire::PROTOCOL_VERSION + 1)),
            std::string::npos) << refusal->message;
}

// A well-framed Hello whose body is garbage: refused as malformed, no crash.
TEST(Handshake, GarbageHelloBodyIsRefused) {
  Result<Refusal> refusal = Status(Err::kUnknown, "no answer");
  auto r = ServeAgainst(NoAuth(), kTimeoutMs, [&](FrameSocket& fs) {
    std::vector<uint64_t> body = {uint64_t{3} << 32, 0xdeadbeefdeadbeefull, 0x0123456789abcdefull, 0xffffffffffffffffull};
    OutFrame f;
    f.kind = FrameKind::kHandshake;
    f.body = body;
    ASSERT_TRUE(fs.Write(f).ok());
    refusal = ReadRefusal(fs);
  });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Err::kInvalidValue);
  ASSERT_TRUE(refusal.ok()) << refusal.status().ToString();
  EXPECT_EQ(refusal->code, Err::kInvalidValue);
}

// A data-path frame instead of a Hello is refused.
TEST(Handshake, RequestFrameInsteadOfHelloIsRefused) {
  Result<Refusal> refusal = Status(Err::kUnknown, "no answer");
  auto r = ServeAgainst(NoAuth(), kTimeoutMs, [&](FrameSocket& fs) {
    ScratchMessage msg;
    msg.InitRoot<wire::Request>().setPing();
    OutFrame f;
    f.kind = FrameKind::kRequest;
    f.body = msg.Flatten();
    ASSERT_TRUE(fs.Write(f).ok());
    refusal = ReadRefusal(fs);
  });
  ASSERT_FALSE(r.ok());
  ASSERT_TRUE(refusal.ok()) << refusal.status().ToString();
  EXPECT_NE(refusal->message.find("handshake"), std::string::npos) << refusal->message;
}

// Bytes that are not a Remora frame at all (an HTTP client, a port scanner, a peer of
// another protocol version with another magic): the server returns an error, does not
// crash, and answers with a Refusal that says what went wrong (the header promises "a
// Refusal has already been sent to the client when the socket still works").
// DISABLED: RunServerHandshake returns from `sock.Read` without sending a Refusal when
// the first frame header is invalid, so the client sees the connection close with no
// reason. See the report for the proposed fix.
TEST(Handshake, NonRemoraBytesGetARefusal) {
  Result<Refusal> refusal = Status(Err::kUnknown, "no answer");
  auto r = ServeAgainst(NoAuth(), kTimeoutMs, [&](FrameSocket& fs) {
    const char req[] = "GET / HTTP/1.1\r\nHost: remora\r\n\r\n";
    ASSERT_EQ(::write(fs.fd(), req, sizeof(req) - 1), static_cast<ssize_t>(sizeof(req) - 1));
    refusal = ReadRefusal(fs);
  });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Err::kInvalidValue);
  ASSERT_TRUE(refusal.ok()) << "no Refusal came back: " << refusal.status().ToString();
  EXPECT_NE(refusal->message.find("magic"), std::string::npos) << refusal->message;
}

// The part of the above that holds today: garbage ends the server side with an error, and
// quickly (it does not wait for the timeout).
TEST(Handshake, NonRemoraBytesEndTheServerSideWithAnError) {
  auto start = std::chrono::steady_clock::now();
  auto r = ServeAgainst(NoAuth(), kTimeoutMs, [&](FrameSocket& fs) {
    const char req[] = "GET / HTTP/1.1\r\nHost: remora\r\n\r\n";
    ASSERT_EQ(::write(fs.fd(), req, sizeof(req) - 1), static_cast<ssize_t>(sizeof(req) - 1));
    (void)fs.Read(kTimeoutMs);  // whatever comes back, or the close
  });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Err::kInvalidValue);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(kTimeoutMs / 2));
}

// A client that connects and says nothing does not hold the server forever.
TEST(Handshake, SilentClientTimesOut) {
  auto start = std::chrono::steady_clock::now();
  auto r = ServeAgainst(NoAuth(), 150, [&](FrameSocket& fs) {
    // Stay connected and silent until the server gives up and drops the connection.
    (void)fs.Read(2000);
  });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Err::kTimeout);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
}

// ... and a client whose server never answers gets kTimeout, not a hang.
TEST(Handshake, SilentServerTimesOutOnTheClient) {
  Sockets s;
  FrameSocket fc(s.client.get());
  auto start = std::chrono::steady_clock::now();
  auto r = RunClientHandshake(fc, std::nullopt, {}, 150);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Err::kTimeout);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
}

}  // namespace
}  // namespace remora
