// protocol/: the session handshake (Hello -> Challenge -> Proof -> Welcome | Refusal) over a
// unix socketpair, the server side in a thread.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <thread>
#include <tuple>

#include "remora.capnp.h"
#include "remora/protocol/handshake.h"
#include "remora/protocol/message.h"
#include "test_util.h"

namespace remora {
namespace {

constexpr int kTimeoutMs = 5000;

class FakeKeys final : public TenantKeys {
 public:
  std::map<std::string, TenantVerifier, std::less<>> keys;
  std::optional<TenantVerifier> Lookup(std::string_view tenant) override {
    auto it = keys.find(tenant);
    if (it == keys.end()) return std::nullopt;
    return it->second;
  }
};

TenantVerifier VerifierOf(const Secret& s) {
  Verifier v = VerifierFor(s);
  return TenantVerifier{v.stored_key, v.server_key};
}

struct Sockets {
  Fd client, server;
  Sockets() {
    std::tie(client, server) = test::SocketPair();
    EXPECT_TRUE(client && server);
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
  info.kernel_driver = "580.159.04";
  return info;
}

ClientHandshakeOptions With(const std::optional<Token>& token) {
  ClientHandshakeOptions o;
  o.token = token;
  return o;
}

// Runs both sides; the server sends Welcome when it authenticates the peer.
Outcome Handshake(const ServerAuthPolicy& policy, const ClientHandshakeOptions& client,
                  std::span<const int> client_fds = {}, ServerConnectionInfo conn = {}) {
  Sockets s;
  Outcome out;
  std::thread server([&] {
    FrameSocket fs(s.server.get());
    out.server.emplace(RunServerHandshake(fs, policy, &out.hello_fds, kTimeoutMs, conn));
    if (out.server->ok()) { EXPECT_TRUE(SendWelcome(fs, **out.server, WelcomeFor(**out.server)).ok()); }
  });
  FrameSocket fc(s.client.get());
  out.client.emplace(RunClientHandshake(fc, client, client_fds, kTimeoutMs));
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
    keys.keys["alpha"] = VerifierOf(token.secret);
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
  Outcome o = Handshake(NoAuth(), With(std::nullopt));
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
  EXPECT_EQ(info.kernel_driver, "580.159.04");  // NVML's nvmlSystemGetDriverVersion answers it

  Token t;
  t.tenant = "someone";
  t.secret = RandomSecret();
  ClientHandshakeOptions local = With(t);
  local.insecure_local = true;
  Outcome o2 = Handshake(NoAuth(), local);
  ASSERT_TRUE(o2.server->ok());
  EXPECT_EQ((*o2.server)->tenant, "local") << "a token does not choose the tenant on an --auth none server";
  ASSERT_TRUE(o2.client->ok()) << o2.client->status().ToString();
  EXPECT_FALSE((*o2.client)->server_authenticated);
}

// A client holding a token refuses a server that does not authenticate itself (a fake
// server can always claim --auth none), unless told it is a private local server.
TEST(Handshake, ClientWithATokenRefusesAServerWithoutAuthentication) {
  Token t;
  t.tenant = "someone";
  t.secret = RandomSecret();
  Outcome o = Handshake(NoAuth(), With(t));
  ASSERT_FALSE(o.client->ok());
  EXPECT_EQ(o.client->status().code(), Err::kNoDevice);
  EXPECT_NE(o.client->status().message().find("REMORA_INSECURE_LOCAL"), std::string::npos) << o.client->status().message();
}

// The client's window for this server (its index among several) reaches the server; the
// default is window 0.
TEST(Handshake, WindowTravelsWithTheHello) {
  Outcome o = Handshake(NoAuth(), With(std::nullopt));
  ASSERT_TRUE(o.server->ok()) << o.server->status().ToString();
  EXPECT_EQ((*o.server)->window, 0);
  ClientHandshakeOptions second = With(std::nullopt);
  second.window = 3;
  Outcome o2 = Handshake(NoAuth(), second);
  ASSERT_TRUE(o2.server->ok()) << o2.server->status().ToString();
  EXPECT_EQ((*o2.server)->window, 3);
  ASSERT_TRUE(o2.client->ok()) << o2.client->status().ToString();
}

// Descriptors sent with the Hello (the shm segment) arrive on the server side.
TEST(Handshake, DescriptorsTravelWithTheHello) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  Fd rd(p[0]), wr(p[1]);
  int fds[1] = {wr.get()};
  Outcome o = Handshake(NoAuth(), With(std::nullopt), fds);
  ASSERT_TRUE(o.server->ok());
  ASSERT_EQ(o.hello_fds.size(), 1u);
  ASSERT_EQ(::write(o.hello_fds[0].get(), "x", 1), 1) << "the received descriptor is the pipe's write end";
  char c = 0;
  ASSERT_EQ(::read(rd.get(), &c, 1), 1);
  EXPECT_EQ(c, 'x');
}

TEST_F(AuthHandshake, CorrectTokenIsAccepted) {
  Outcome o = Handshake(policy, With(token));
  ASSERT_TRUE(o.server->ok()) << o.server->status().ToString();
  EXPECT_EQ((*o.server)->tenant, "alpha");
  ASSERT_TRUE(o.client->ok()) << o.client->status().ToString();
  EXPECT_EQ((*o.client)->tenant, "alpha");
  EXPECT_TRUE((*o.client)->server_authenticated) << "the server proved it knows the tenant's ServerKey";
}

// A server that has the tenant's StoredKey but not its ServerKey (an impostor that stole
// half a verifier, or guessed) cannot sign the Welcome: the client refuses it.
TEST_F(AuthHandshake, ServerWithoutTheServerKeyIsRefusedByTheClient) {
  keys.keys["alpha"].server_key = ServerKeyFor(RandomSecret());
  Outcome o = Handshake(policy, With(token));
  ASSERT_TRUE(o.server->ok()) << "the proof itself checks out";
  ASSERT_FALSE(o.client->ok());
  EXPECT_EQ(o.client->status().code(), Err::kNoDevice);
  EXPECT_NE(o.client->status().message().find("did not prove"), std::string::npos) << o.client->status().message();
  // A tenant created before servers signed (no ServerKey stored): refused the same way.
  keys.keys["alpha"].server_key.reset();
  Outcome o2 = Handshake(policy, With(token));
  ASSERT_FALSE(o2.client->ok());
  EXPECT_NE(o2.client->status().message().find("new token"), std::string::npos) << o2.client->status().message();
}

// Encryption is negotiated in the handshake, and both ends derive the same keys.
TEST_F(AuthHandshake, EncryptionIsNegotiated) {
  ServerConnectionInfo tcp_remote{true, false}, tcp_local{true, true}, shm{false, false};
  ClientHandshakeOptions c = With(token);
  c.can_encrypt = true;
  Outcome remote = Handshake(policy, c, {}, tcp_remote);
  ASSERT_TRUE(remote.client->ok()) << remote.client->status().ToString();
  ASSERT_TRUE((*remote.client)->keys.has_value()) << "auto: a peer that is not on this host is encrypted";
  ASSERT_TRUE((*remote.server)->keys.has_value());
  EXPECT_EQ((*remote.client)->keys->client_to_server, (*remote.server)->keys->client_to_server);
  EXPECT_EQ((*remote.client)->keys->server_to_client, (*remote.server)->keys->server_to_client);
  EXPECT_NE((*remote.client)->keys->client_to_server, (*remote.client)->keys->server_to_client);
  Outcome local = Handshake(policy, c, {}, tcp_local);
  ASSERT_TRUE(local.client->ok());
  EXPECT_FALSE((*local.client)->keys.has_value()) << "auto: loopback is not encrypted";
  c.encrypt = EncryptMode::kOn;
  Outcome forced = Handshake(policy, c, {}, tcp_local);
  ASSERT_TRUE(forced.client->ok()) << forced.client->status().ToString();
  EXPECT_TRUE((*forced.client)->keys.has_value()) << "REMORA_ENCRYPT=on encrypts loopback too";
  // Contradictory requirements fail, saying so, on both sides.
  ServerAuthPolicy off = policy;
  off.encrypt = EncryptMode::kOff;
  Outcome clash = Handshake(off, c, {}, tcp_local);
  ASSERT_FALSE(clash.client->ok());
  EXPECT_NE(clash.client->status().message().find("encryption"), std::string::npos) << clash.client->status().message();
  // A transport that cannot encrypt fails a client that requires it, before connecting.
  ClientHandshakeOptions shm_client = With(token);
  shm_client.encrypt = EncryptMode::kOn;
  Outcome no = Handshake(policy, shm_client, {}, shm);
  ASSERT_FALSE(no.client->ok());
  EXPECT_NE(no.client->status().message().find("does not encrypt"), std::string::npos) << no.client->status().message();
}

// Identity fields over the limit are refused before anything is logged or stored.
TEST(Handshake, OversizedIdentityFieldsAreRefused) {
  Result<AuthenticatedPeer> r = Status(Err::kUnknown, "not run");
  Sockets s;
  std::thread server([&] {
    FrameSocket fs(s.server.get());
    r = RunServerHandshake(fs, ServerAuthPolicy{false, nullptr, "local", "test"}, nullptr, kTimeoutMs);
  });
  FrameSocket fc(s.client.get());
  ScratchMessage msg;
  auto hello = msg.InitRoot<wire::HandshakeMessage>().initHello();
  hello.setProtocolVersion(wire::PROTOCOL_VERSION);
  Nonce n = RandomNonce();
  hello.setClientNonce(capnp::Data::Reader(n.data(), n.size()));
  hello.setKeyShare(capnp::Data::Reader(n.data(), n.size()));
  hello.initClient().setHostname(std::string(kMaxIdentityBytes + 1, 'h'));
  OutFrame f;
  f.kind = FrameKind::kHandshake;
  f.body = msg.Flatten();
  ASSERT_TRUE(fc.Write(f).ok());
  server.join();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("hostname"), std::string::npos) << r.status().message();
}

TEST_F(AuthHandshake, WrongTokenIsRefusedWithNoDevice) {
  Token wrong = token;
  wrong.secret = RandomSecret();
  Outcome o = Handshake(policy, With(wrong));
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
  Outcome o = Handshake(policy, With(stranger));
  ASSERT_FALSE(o.client->ok());
  EXPECT_EQ(o.client->status().code(), Err::kNoDevice);
  Token wrong = token;
  wrong.secret = RandomSecret();
  Outcome o2 = Handshake(policy, With(wrong));
  std::string a = o.client->status().message(), b = o2.client->status().message();
  EXPECT_EQ(a.substr(0, a.find('\'')), b.substr(0, b.find('\''))) << a << " / " << b;
  ASSERT_FALSE(o.server->ok());
  EXPECT_NE(o.server->status().message().find("no such tenant"), std::string::npos) << o.server->status().message();
}

// A client without a token learns from the Challenge that one is required, and says so
// naming the environment variable; the server does not hang on it.
TEST_F(AuthHandshake, MissingTokenNamesRemoraToken) {
  auto start = std::chrono::steady_clock::now();
  Outcome o = Handshake(policy, With(std::nullopt));
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
  Outcome o = Handshake(policy, With(nameless));
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
  auto r = RunClientHandshake(fc, With(std::nullopt), {}, 150);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Err::kTimeout);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
}

}  // namespace
}  // namespace remora

#include <capnp/serialize.h>

namespace remora {
namespace {

// A pool's locate handshake (docs/PROTOCOL.md): the server answers where the tenant's GPUs
// are, and that answer is part of what it signs.
struct LocateRun {
  std::optional<Result<AuthenticatedPeer>> server;
  std::optional<Result<SessionInfo>> client;
};

LocateRun Locate(const ServerAuthPolicy& policy, const Token& token, const std::string& swap_first_to = "") {
  Sockets s;
  LocateRun out;
  std::thread server([&] {
    FrameSocket fs(s.server.get());
    out.server.emplace(RunServerHandshake(fs, policy, nullptr, kTimeoutMs));
    if (!out.server->ok()) return;
    SessionInfo info = WelcomeFor(**out.server);
    info.session_id = 0;
    info.pool_servers = {{"tcp://gpu1:7070", 2}, {"tcp://gpu2:7070", 1}};
    std::vector<uint64_t> body = WelcomeBody(**out.server, info);
    if (!swap_first_to.empty()) {  // what a relay in the middle would like to send
      auto words = kj::arrayPtr(reinterpret_cast<const capnp::word*>(body.data()), body.size());
      capnp::FlatArrayMessageReader reader(words);
      capnp::MallocMessageBuilder changed;
      changed.setRoot(reader.getRoot<wire::HandshakeMessage>());
      changed.getRoot<wire::HandshakeMessage>().getWelcome().getPoolServers().set(0, swap_first_to);
      auto flat = capnp::messageToFlatArray(changed);
      body.assign(reinterpret_cast<const uint64_t*>(flat.begin()), reinterpret_cast<const uint64_t*>(flat.end()));
    }
    OutFrame f;
    f.kind = FrameKind::kHandshake;
    f.body = body;
    EXPECT_TRUE(fs.Write(f).ok());
  });
  FrameSocket fc(s.client.get());
  ClientHandshakeOptions o = With(token);
  o.locate = true;
  out.client.emplace(RunClientHandshake(fc, o, {}, kTimeoutMs));
  s.client.reset();
  server.join();
  return out;
}

TEST_F(AuthHandshake, LocateAnswersTheSignedListOfServers) {
  LocateRun r = Locate(policy, token);
  ASSERT_TRUE(r.server->ok()) << r.server->status().ToString();
  EXPECT_TRUE((*r.server)->locate);
  ASSERT_TRUE(r.client->ok()) << r.client->status().ToString();
  EXPECT_TRUE((*r.client)->server_authenticated);
  std::vector<std::pair<std::string, uint32_t>> want = {{"tcp://gpu1:7070", 2}, {"tcp://gpu2:7070", 1}};
  EXPECT_EQ((*r.client)->pool_servers, want);
  Outcome session = Handshake(policy, With(token));
  ASSERT_TRUE(session.server->ok());
  EXPECT_FALSE((*session.server)->locate) << "a session's Hello does not ask";
  EXPECT_TRUE((*session.client)->pool_servers.empty());
}

TEST_F(AuthHandshake, ALocateAnswerChangedOnTheWayIsRefused) {
  LocateRun r = Locate(policy, token, "tcp://elsewhere:7070");
  ASSERT_TRUE(r.server->ok());
  ASSERT_FALSE(r.client->ok()) << "the client went where the signature does not say";
  EXPECT_EQ(r.client->status().code(), Err::kNoDevice);
}

}  // namespace
}  // namespace remora
