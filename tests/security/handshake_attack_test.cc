// F6, F11, F12 (docs/SECURITY.md): attacks on the session handshake against a real
// remora-server - a relay that hijacks an authenticated connection, an active man in the
// middle, fake servers, a stolen state database with a recorded handshake, and the timing
// of unknown tenants.
#include <poll.h>
#include <sodium.h>
#include <sys/socket.h>

#include <algorithm>

#include "relay.h"
#include "remora/base/util.h"
#include "remora/protocol/message.h"
#include "secure/handshake_crypto.h"
#include "security_support.h"

namespace remora::security {
namespace {

constexpr uint64_t kHijackTag = 77;

// The relay's own request on a victim's connection: a 1 MiB allocation as the victim's
// tenant. True if the server answered it (in plaintext, as a Remora reply).
bool InjectAllocation(int server_fd) {
  ScratchMessage msg;
  auto req = msg.InitRoot<wire::Request>();
  req.setDevice(0);
  req.initMemAlloc().setSize(1 << 20);
  auto body = msg.Flatten();
  FrameHeader h;
  h.kind = static_cast<uint16_t>(FrameKind::kRequest);
  h.flags = kFlagExpectsReply;
  h.tag = kHijackTag;
  h.body_words = static_cast<uint32_t>(body.size());
  std::string out(reinterpret_cast<const char*>(&h), sizeof(h));
  out.append(reinterpret_cast<const char*>(body.data()), body.size_bytes());
  if (::write(server_fd, out.data(), out.size()) != static_cast<ssize_t>(out.size())) return false;
  std::string in;
  char buf[4096];
  for (int i = 0; i < 50; i++) {
    struct pollfd p = {server_fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    ssize_t n = ::read(server_fd, buf, sizeof(buf));
    if (n <= 0) return false;  // the server dropped the connection
    in.append(buf, static_cast<size_t>(n));
    if (in.size() >= sizeof(FrameHeader)) {
      FrameHeader r;
      std::memcpy(&r, in.data(), sizeof(r));
      return r.magic == kFrameMagic && r.kind == static_cast<uint16_t>(FrameKind::kReply) && r.tag == kHijackTag;
    }
  }
  return false;
}

class HandshakeAttack : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(s_.Start());
    alice_ = s_.CreateTenant("alice");
    auto ep = ParseEndpoint(s_.server.Url("tcp"));
    ASSERT_TRUE(ep.ok());
    port_ = ep->port;
  }
  TenancyServer s_;
  std::string alice_;
  uint16_t port_ = 0;
};

// The review's relay: it forwarded a real client's handshake, then used the authenticated
// connection itself. With the data path encrypted (the default off this host; here forced
// on loopback with REMORA_ENCRYPT=on) the relay's bytes are not records under the session
// keys, which it cannot know: the worker ends the session and answers nothing. Without
// encryption the hijack works - which shows the relay really attacks, and is why TCP off
// the host is encrypted by default.
TEST_F(HandshakeAttack, ARelayCannotHijackAnEncryptedSession) {
  for (bool encrypted : {true, false}) {
    std::atomic<int> answered{-1};
    Relay relay("127.0.0.1", port_, [&](int fd) { answered = InjectAllocation(fd) ? 1 : 0; });
    ConnectOptions o;
    o.encrypt = encrypted ? EncryptMode::kOn : EncryptMode::kOff;
    o.timeout_ms = 5000;
    auto victim = RawSession::Open(relay.Url(), alice_, o);
    ASSERT_TRUE(victim.ok()) << victim.status().ToString();
    EXPECT_TRUE((*victim)->session().server_authenticated);
    ASSERT_TRUE(Eventually([&] { return answered.load() != -1; }, 10000));
    if (encrypted) EXPECT_EQ(answered.load(), 0) << "the relay's injected request was served";
    else EXPECT_EQ(answered.load(), 1) << "the unencrypted hijack should work (else this test proves nothing)";
  }
  // The worker saw bytes that are not records of the session (how it says so depends on
  // where the relay's bytes fail: the record length or its authentication tag).
  std::string log = s_.server.Log();
  EXPECT_TRUE(log.find("encrypted stream from") != std::string::npos || log.find("failed authentication") != std::string::npos)
      << log;
}

// An active man in the middle runs its own key exchange with each side: it can open the
// client's sealed proof, but the proof is bound to the client's exchange, so the real
// server refuses it on the man in the middle's connection.
TEST_F(HandshakeAttack, AManInTheMiddleCannotReuseTheProof) {
  auto listener = Listen(*ParseEndpoint("tcp://127.0.0.1:0"));
  ASSERT_TRUE(listener.ok());
  std::optional<Status> upstream;
  std::thread mitm([&] {
    auto pc = (*listener)->Accept();
    ASSERT_TRUE(pc.ok());
    FrameSocket client(pc->socket.get());
    // Server side towards the victim: its own exchange.
    auto hello = client.Read(5000);
    ASSERT_TRUE(hello.ok());
    std::vector<uint64_t> hello_body(hello->body.begin(), hello->body.end());
    handshake::KeyExchange mine;
    std::array<uint8_t, handshake::kShareBytes> victim_share{};
    std::string tenant;
    (void)GuardDecode("hello", [&]() -> Status {
      BodyReader r(hello_body);
      auto h = r.Root<wire::HandshakeMessage>().getHello();
      std::memcpy(victim_share.data(), h.getKeyShare().begin(), victim_share.size());
      tenant = h.getTenant();
      return Status::Ok();
    });
    ScratchMessage cm;
    auto ch = cm.InitRoot<wire::HandshakeMessage>().initChallenge();
    Nonce sn = RandomNonce();
    ch.setServerNonce(capnp::Data::Reader(sn.data(), sn.size()));
    ch.setAuthRequired(true);
    ch.setKeyShare(capnp::Data::Reader(mine.share.data(), mine.share.size()));
    auto cflat = cm.Flatten();
    std::vector<uint64_t> challenge(cflat.begin(), cflat.end());
    OutFrame f;
    f.kind = FrameKind::kHandshake;
    f.body = challenge;
    ASSERT_TRUE(client.Write(f).ok());
    handshake::Derived with_victim;
    ASSERT_TRUE(handshake::Derive(mine, victim_share, hello_body, challenge, &with_victim));
    auto proof_frame = client.Read(5000);
    ASSERT_TRUE(proof_frame.ok());
    Key proof{};
    bool opened = false;
    (void)GuardDecode("proof", [&]() -> Status {
      BodyReader r(proof_frame->body);
      auto sealed = r.Root<wire::HandshakeMessage>().getProof().getSealedProof();
      opened = handshake::OpenProof(sealed.begin(), sealed.size(), with_victim.proof_key, &proof);
      return Status::Ok();
    });
    ASSERT_TRUE(opened) << "the man in the middle does get the victim's proof";
    // Client side towards the real server: its own exchange again, the victim's proof.
    auto server_fd = TcpConnectForTest(port_);
    FrameSocket server(server_fd.get());
    handshake::KeyExchange mine2;
    ScratchMessage hm;
    auto h2 = hm.InitRoot<wire::HandshakeMessage>().initHello();
    h2.setProtocolVersion(wire::PROTOCOL_VERSION);
    h2.setTenant(tenant);
    Nonce cn = RandomNonce();
    h2.setClientNonce(capnp::Data::Reader(cn.data(), cn.size()));
    h2.setKeyShare(capnp::Data::Reader(mine2.share.data(), mine2.share.size()));
    h2.setEncrypt(static_cast<uint8_t>(EncryptMode::kOff));
    auto hflat = hm.Flatten();
    std::vector<uint64_t> hello2(hflat.begin(), hflat.end());
    f.body = hello2;
    ASSERT_TRUE(server.Write(f).ok());
    auto ch2 = server.Read(5000);
    ASSERT_TRUE(ch2.ok());
    std::vector<uint64_t> challenge2(ch2->body.begin(), ch2->body.end());
    std::array<uint8_t, handshake::kShareBytes> server_share{};
    (void)GuardDecode("challenge", [&]() -> Status {
      BodyReader r(challenge2);
      std::memcpy(server_share.data(), r.Root<wire::HandshakeMessage>().getChallenge().getKeyShare().begin(), 32);
      return Status::Ok();
    });
    handshake::Derived with_server;
    ASSERT_TRUE(handshake::Derive(mine2, server_share, hello2, challenge2, &with_server));
    ScratchMessage pm;
    auto sealed = handshake::SealProof(proof, with_server.proof_key);
    pm.InitRoot<wire::HandshakeMessage>().initProof().setSealedProof(capnp::Data::Reader(sealed.data(), sealed.size()));
    f.body = pm.Flatten();
    ASSERT_TRUE(server.Write(f).ok());
    auto answer = server.Read(5000);
    ASSERT_TRUE(answer.ok());
    upstream = GuardDecode("answer", [&]() -> Status {
      BodyReader r(answer->body);
      auto m = r.Root<wire::HandshakeMessage>();
      if (m.isWelcome()) return Status::Ok();
      return Status(static_cast<Err>(m.getRefusal().getError()), m.getRefusal().getMessage().cStr());
    });
  });
  ConnectOptions o;
  o.timeout_ms = 3000;
  auto victim = RawSession::Open((*listener)->endpoint().ToUrl(), alice_, o);
  mitm.join();
  ASSERT_TRUE(upstream.has_value());
  EXPECT_FALSE(upstream->ok()) << "the real server accepted a proof relayed through a man in the middle";
  EXPECT_NE(upstream->message().find("authentication failed"), std::string::npos) << upstream->message();
  EXPECT_FALSE(victim.ok()) << "the victim accepted a server that could not sign";
}

// Fake servers: one that says it needs no authentication, and one that asks for a proof but
// cannot sign the Welcome. A real application holding a token refuses both (and sends them
// no work).
TEST_F(HandshakeAttack, TheShimRefusesFakeServers) {
  for (bool claims_auth : {false, true}) {
    auto listener = Listen(*ParseEndpoint("tcp://127.0.0.1:0"));
    ASSERT_TRUE(listener.ok());
    std::atomic<bool> got_request{false};
    std::thread fake([&] {
      auto pc = (*listener)->Accept();
      if (!pc.ok()) return;
      FrameSocket fs(pc->socket.get());
      ServerAuthPolicy policy;
      policy.auth_required = claims_auth;
      struct AnyTenant final : TenantKeys {
        std::optional<TenantVerifier> Lookup(std::string_view) override {
          // It cannot know the tenant's verifier: the proof fails, so it "accepts" anyway
          // below with a made-up signature.
          Verifier v = VerifierFor(RandomSecret());
          return TenantVerifier{v.stored_key, v.server_key};
        }
      } keys;
      policy.keys = &keys;
      ServerHandshake hs(policy, ServerConnectionInfo{true, true});
      auto hello = fs.Read(5000);
      if (!hello.ok()) return;
      auto ch = hs.OnHello(hello->body);
      if (!ch.ok()) return;
      OutFrame f;
      f.kind = FrameKind::kHandshake;
      f.body = *ch;
      (void)fs.Write(f);
      auto proof = fs.Read(5000);
      if (!proof.ok()) return;
      AuthenticatedPeer fake_peer;
      fake_peer.tenant = "alice";
      if (claims_auth) {
        fake_peer.auth_message = "whatever";
        fake_peer.server_key = ServerKeyFor(RandomSecret());
      }
      SessionInfo info;
      info.session_id = 1;
      info.tenant = "alice";
      info.backend = "host-emulated";
      (void)SendWelcome(fs, fake_peer, info);
      got_request = fs.Read(3000).ok();  // anything the client sends after the Welcome
    });
    auto env = s_.Env("tcp", alice_);
    env["REMORA_SERVER"] = (*listener)->endpoint().ToUrl();
    RunResult r = testing::Run({BinDir() + "/app_device_info"}, env, 60);
    fake.join();
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(claims_auth ? "did not prove" : "does not authenticate"), std::string::npos) << r.output;
    EXPECT_FALSE(got_request.load()) << "the application sent work to a fake server";
  }
}

// The review's "dbsteal": the StoredKey from state.db plus one recorded handshake gave a
// reusable credential (ClientKey = proof XOR HMAC(StoredKey, AuthMessage)). Now the proof
// crosses the wire sealed under a key from the ephemeral exchange: an observer holding the
// database finds no 32 bytes in the recorded Proof that, XORed with an HMAC of any message
// it can compute, hash to the StoredKey.
TEST_F(HandshakeAttack, TheStoredKeyAndARecordedHandshakeAreNotACredential) {
  Relay recorder("127.0.0.1", port_);
  auto victim = RawSession::Open(recorder.Url(), alice_);
  ASSERT_TRUE(victim.ok()) << victim.status().ToString();
  RunResult db = testing::Run({"sqlite3", s_.server.state_dir() + "/state.db",
                               "SELECT stored_key FROM tenants WHERE name='alice'"});
  ASSERT_EQ(db.exit_code, 0) << db.output;
  auto stored = KeyFromHex(db.output.substr(0, 64));
  ASSERT_TRUE(stored.ok()) << db.output;
  std::string c2s = recorder.ClientToServer(), s2c = recorder.ServerToClient();
  // The public parts of the exchange, as the observer sees them.
  auto frame_body = [](const std::string& stream, int index) {
    size_t at = 0;
    for (int i = 0;; i++) {
      FrameHeader h;
      std::memcpy(&h, stream.data() + at, sizeof(h));
      size_t n = size_t{h.body_words} * 8;
      if (i == index) return std::string(stream.data() + at + sizeof(h), n);
      at += sizeof(h) + n;
    }
  };
  std::string hello = frame_body(c2s, 0), proof = frame_body(c2s, 1), challenge = frame_body(s2c, 0);
  Nonce cn{}, sn{};
  // Candidate authentication messages: the old format and the new one with a binding made
  // from what is public (the transcript).
  auto words = [](const std::string& s) {
    std::vector<uint64_t> w(s.size() / 8);
    std::memcpy(w.data(), s.data(), w.size() * 8);
    return w;
  };
  (void)GuardDecode("hello", [&]() -> Status {
    auto hw = words(hello);
    BodyReader r(hw);
    std::memcpy(cn.data(), r.Root<wire::HandshakeMessage>().getHello().getClientNonce().begin(), 32);
    return Status::Ok();
  });
  (void)GuardDecode("challenge", [&]() -> Status {
    auto cw = words(challenge);
    BodyReader r(cw);
    std::memcpy(sn.data(), r.Root<wire::HandshakeMessage>().getChallenge().getServerNonce().begin(), 32);
    return Status::Ok();
  });
  std::vector<std::string> messages;
  std::string v1 = "remora-auth-v1|alice|";
  v1.append(reinterpret_cast<const char*>(cn.data()), 32).append(reinterpret_cast<const char*>(sn.data()), 32);
  messages.push_back(v1);
  SessionKey public_binding{};
  std::string transcript = hello + challenge;
  crypto_generichash(public_binding.data(), 32, reinterpret_cast<const unsigned char*>(transcript.data()),
                     transcript.size(), nullptr, 0);
  messages.push_back(handshake::AuthMessage("alice", public_binding));
  int windows = 0;
  for (size_t off = 0; off + 32 <= proof.size(); off++) {
    for (const std::string& m : messages) {
      Key candidate{};
      std::memcpy(candidate.data(), proof.data() + off, 32);
      uint8_t sig[32];
      crypto_auth_hmacsha256(sig, reinterpret_cast<const unsigned char*>(m.data()), m.size(), stored->data());
      for (int i = 0; i < 32; i++) candidate[static_cast<size_t>(i)] ^= sig[i];
      Key h;
      crypto_hash_sha256(h.data(), candidate.data(), candidate.size());
      EXPECT_NE(h, *stored) << "a ClientKey was recovered from the recording at offset " << off;
      windows++;
    }
  }
  EXPECT_GT(windows, 0);
}

// F12: an unknown tenant's handshake does the same work as a wrong token. Measured on the
// server's handshake code itself (network jitter on a shared machine hides microseconds):
// the median time to process a Proof differs by less than 15% (checking the proof is most
// of that time, and it used to be skipped for unknown tenants).
TEST(HandshakeTiming, UnknownTenantsTakeAsLongAsWrongTokens) {
  struct Keys final : TenantKeys {
    TenantVerifier v = [] {
      Verifier x = VerifierFor(RandomSecret());
      return TenantVerifier{x.stored_key, x.server_key};
    }();
    std::optional<TenantVerifier> Lookup(std::string_view t) override {
      if (t == "alice") return v;
      return std::nullopt;
    }
  } keys;
  ServerAuthPolicy policy;
  policy.keys = &keys;
  auto sample = [&](const std::string& tenant) -> uint64_t {
    ServerHandshake hs(policy, ServerConnectionInfo{});
    handshake::KeyExchange client;
    ScratchMessage hm;
    auto h = hm.InitRoot<wire::HandshakeMessage>().initHello();
    h.setProtocolVersion(wire::PROTOCOL_VERSION);
    h.setTenant(tenant);
    Nonce cn = RandomNonce();
    h.setClientNonce(capnp::Data::Reader(cn.data(), cn.size()));
    h.setKeyShare(capnp::Data::Reader(client.share.data(), client.share.size()));
    auto hflat = hm.Flatten();
    std::vector<uint64_t> hello(hflat.begin(), hflat.end());
    auto ch = hs.OnHello(hello);
    EXPECT_TRUE(ch.ok());
    std::array<uint8_t, handshake::kShareBytes> share{};
    (void)GuardDecode("c", [&]() -> Status {
      BodyReader r(*ch);
      std::memcpy(share.data(), r.Root<wire::HandshakeMessage>().getChallenge().getKeyShare().begin(), 32);
      return Status::Ok();
    });
    handshake::Derived d;
    EXPECT_TRUE(handshake::Derive(client, share, hello, *ch, &d));
    Key wrong = ClientProof(RandomSecret(), handshake::AuthMessage(tenant, d.binding));
    ScratchMessage pm;
    auto sealed = handshake::SealProof(wrong, d.proof_key);
    pm.InitRoot<wire::HandshakeMessage>().initProof().setSealedProof(capnp::Data::Reader(sealed.data(), sealed.size()));
    auto pflat = pm.Flatten();
    std::vector<uint64_t> proof(pflat.begin(), pflat.end());
    uint64_t t0 = MonotonicNanos();
    auto r = hs.OnProof(proof);
    uint64_t t1 = MonotonicNanos();
    EXPECT_FALSE(r.ok());
    return t1 - t0;
  };
  std::vector<uint64_t> known, unknown;
  for (int i = 0; i < 3000; i++) {
    known.push_back(sample("alice"));
    unknown.push_back(sample("nosuchtenant"));
  }
  auto median = [](std::vector<uint64_t> v) {
    std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
    return static_cast<double>(v[v.size() / 2]);
  };
  double a = median(known), b = median(unknown);
  EXPECT_LT(std::abs(a - b) / std::max(a, b), 0.15) << "wrong token " << a << " ns, unknown tenant " << b << " ns";
}

}  // namespace
}  // namespace remora::security
