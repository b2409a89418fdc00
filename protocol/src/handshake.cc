#include "remora/protocol/handshake.h"

#include <pwd.h>
#include <sodium.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include "remora.capnp.h"
#include "remora/base/util.h"
#include "remora/protocol/message.h"
#include "secure/handshake_crypto.h"

namespace remora {
namespace {

using namespace handshake;

capnp::Data::Reader AsData(const uint8_t* p, size_t n) { return capnp::Data::Reader(p, n); }

template <size_t N>
bool CopyData(capnp::Data::Reader d, std::array<uint8_t, N>* out) {
  if (d.size() != N) return false;
  std::memcpy(out->data(), d.begin(), N);
  return true;
}

std::vector<uint64_t> Copy(std::span<const uint64_t> words) { return {words.begin(), words.end()}; }

Status WriteBody(FrameSocket& sock, std::span<const uint64_t> body, std::span<const int> fds = {}) {
  OutFrame f;
  f.kind = FrameKind::kHandshake;
  f.body = body;
  return sock.Write(f, {}, fds);
}

Cipher BestCommonCipher(uint32_t theirs) {
  uint32_t common = theirs & SupportedCiphers();
  if (common & (1u << static_cast<int>(Cipher::kAes256Gcm))) return Cipher::kAes256Gcm;
  if (common & (1u << static_cast<int>(Cipher::kChaCha20Poly1305))) return Cipher::kChaCha20Poly1305;
  return Cipher::kNone;
}

std::string Cut(std::string s) {
  if (s.size() > kMaxIdentityBytes) s.resize(kMaxIdentityBytes);
  return s;
}

// A verifier nobody has: proofs for unknown tenants are checked against it, so they take as
// long as proofs for known ones and fail the same way.
const TenantVerifier& DummyVerifier() {
  static const TenantVerifier v = [] {
    Verifier r = VerifierFor(RandomSecret());
    return TenantVerifier{r.stored_key, r.server_key};
  }();
  return v;
}

Status Refused(capnp::Text::Reader message, uint32_t error) {
  return Status(static_cast<Err>(error), std::string("server refused the session: ") + Printable(message.cStr(), 512));
}

}  // namespace

PeerIdentity LocalIdentity() {
  PeerIdentity id;
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) == 0) id.hostname = Cut(host);
  id.pid = static_cast<uint32_t>(getpid());
  std::ifstream comm("/proc/self/comm");
  std::getline(comm, id.program);
  id.program = Cut(id.program);
  struct passwd pw, *res = nullptr;
  char buf[1024];
  if (getpwuid_r(getuid(), &pw, buf, sizeof(buf), &res) == 0 && res != nullptr) id.user = Cut(res->pw_name);
  else id.user = std::to_string(getuid());
  return id;
}

// ---- client -----------------------------------------------------------------------------

Result<SessionInfo> RunClientHandshake(FrameSocket& sock, const ClientHandshakeOptions& options,
                                       std::span<const int> fds, int timeout_ms) {
  const std::optional<Token>& token = options.token;
  if (options.encrypt == EncryptMode::kOn && !options.can_encrypt)
    return Error(Err::kNoDevice, "encryption was required (REMORA_ENCRYPT=on) but this transport does not encrypt its "
                                 "data path (only tcp:// does)");
  KeyExchange kx;
  Nonce client_nonce = RandomNonce();
  std::vector<uint64_t> hello_body;
  {
    ScratchMessage msg;
    auto hello = msg.InitRoot<wire::HandshakeMessage>().initHello();
    hello.setProtocolVersion(wire::PROTOCOL_VERSION);
    hello.setTenant(token ? token->tenant : std::string());
    hello.setClientNonce(AsData(client_nonce.data(), client_nonce.size()));
    hello.setShimVersion(REMORA_VERSION);
    PeerIdentity me = LocalIdentity();
    auto id = hello.initClient();
    id.setHostname(me.hostname);
    id.setPid(me.pid);
    id.setProgram(me.program);
    id.setUser(me.user);
    hello.setKeyShare(AsData(kx.share.data(), kx.share.size()));
    EncryptMode mode = options.can_encrypt ? options.encrypt : EncryptMode::kOff;
    hello.setEncrypt(static_cast<uint8_t>(mode));
    hello.setCiphers(options.can_encrypt ? SupportedCiphers() : 0);
    hello.setDataStreams(static_cast<uint8_t>(std::min(options.data_streams, kMaxDataStreams)));
    hello.setWindow(options.window);
    hello.setLocate(options.locate);
    hello_body = Copy(msg.Flatten());
  }
  RETURN_IF_ERROR(WriteBody(sock, hello_body, fds));

  ASSIGN_OR_RETURN(InFrame challenge_frame, sock.Read(timeout_ms));
  std::vector<uint64_t> challenge_body = Copy(challenge_frame.body);
  std::array<uint8_t, kShareBytes> server_share{};
  bool auth_required = false;
  Cipher cipher = Cipher::kNone;
  Status st = GuardDecode("handshake", [&]() -> Status {
    if (challenge_frame.kind() != FrameKind::kHandshake) return Error(Err::kInvalidValue, "expected a handshake frame");
    BodyReader r(challenge_body);
    auto m = r.Root<wire::HandshakeMessage>();
    if (m.isRefusal()) return Refused(m.getRefusal().getMessage(), m.getRefusal().getError());
    if (!m.isChallenge()) return Error(Err::kInvalidValue, "expected a Challenge");
    auto ch = m.getChallenge();
    if (!CopyData(ch.getKeyShare(), &server_share))
      return Error(Err::kNoDevice, "the server speaks an older Remora protocol (no key exchange)");
    auth_required = ch.getAuthRequired();
    cipher = static_cast<Cipher>(ch.getCipher());
    return Status::Ok();
  });
  RETURN_IF_ERROR(st);
  if (auth_required && !token)
    return Error(Err::kNoDevice,
                 "the Remora server requires a tenant token: set REMORA_TOKEN or REMORA_TOKEN_FILE");
  if (!auth_required && token && !options.insecure_local)
    return Error(Err::kNoDevice,
                 "the server does not authenticate itself (it runs without tenant authentication): refusing to send it "
                 "the work of tenant '{}'. If it is a private server you started, set REMORA_INSECURE_LOCAL=1",
                 token->tenant);
  if (cipher != Cipher::kNone && !(SupportedCiphers() & (1u << static_cast<int>(cipher))))
    return Error(Err::kNoDevice, "the server chose a cipher this client does not offer");
  if (cipher == Cipher::kNone && options.can_encrypt && options.encrypt == EncryptMode::kOn)
    return Error(Err::kNoDevice, "encryption was required (REMORA_ENCRYPT=on) but the server did not agree to it");
  if (cipher != Cipher::kNone && (!options.can_encrypt || options.encrypt == EncryptMode::kOff))
    return Error(Err::kNoDevice, "the server requires an encrypted session but REMORA_ENCRYPT=off");

  Derived keys;
  if (!Derive(kx, server_share, hello_body, challenge_body, &keys))
    return Error(Err::kNoDevice, "the server's key share is invalid");
  std::string auth_message;
  bool prove = auth_required && token;
  {
    ScratchMessage msg;
    auto proof = msg.InitRoot<wire::HandshakeMessage>().initProof();
    Key p{};
    if (prove) {
      auth_message = AuthMessage(token->tenant, keys.binding);
      p = ClientProof(token->secret, auth_message);
    }
    auto sealed = SealProof(p, keys.proof_key);
    proof.setSealedProof(AsData(sealed.data(), sealed.size()));
    RETURN_IF_ERROR(WriteBody(sock, msg.Flatten()));
  }

  ASSIGN_OR_RETURN(InFrame welcome_frame, sock.Read(timeout_ms));
  SessionInfo info;
  Key signature{};
  bool signed_welcome = false;
  st = GuardDecode("handshake", [&]() -> Status {
    if (welcome_frame.kind() != FrameKind::kHandshake) return Error(Err::kInvalidValue, "expected a handshake frame");
    BodyReader r(welcome_frame.body);
    auto m = r.Root<wire::HandshakeMessage>();
    if (m.isRefusal()) return Refused(m.getRefusal().getMessage(), m.getRefusal().getError());
    if (!m.isWelcome()) return Error(Err::kInvalidValue, "expected a Welcome");
    auto w = m.getWelcome();
    info.session_id = w.getSessionId();
    info.tenant = w.getTenant();
    info.backend = w.getBackend();
    info.emulated = w.getEmulated();
    info.server_name = w.getServerName();
    info.driver_version = w.getDriverVersion();
    info.kernel_driver = w.getKernelDriver();
    if (info.kernel_driver.size() > 32 || info.kernel_driver.find_first_not_of("0123456789.") != std::string::npos)
      return Error(Err::kInvalidValue, "a malformed kernel driver version in the Welcome");
    info.data_streams = std::min<uint32_t>(w.getDataStreams(), std::min(options.data_streams, kMaxDataStreams));
    auto servers = w.getPoolServers();
    auto gpus = w.getPoolGpus();
    if (servers.size() != gpus.size() || servers.size() > kMaxPoolServers)
      return Error(Err::kInvalidValue, "a malformed list of pool servers");
    for (unsigned i = 0; i < servers.size(); i++) info.pool_servers.emplace_back(servers[i], gpus[i]);
    signed_welcome = CopyData(w.getServerSignature(), &signature);
    return Status::Ok();
  });
  RETURN_IF_ERROR(st);
  if (prove) {
    Key server_key = ServerKeyFor(token->secret);
    bool ok = signed_welcome && VerifyServerSignature(server_key, WelcomeMessage(auth_message, info), signature);
    sodium_memzero(server_key.data(), server_key.size());
    if (!ok)
      return Error(Err::kNoDevice,
                   "the server did not prove that it knows tenant '{}''s token: it is not the Remora server this token "
                   "belongs to (or the tenant was created before servers proved themselves: ask for a new token)",
                   token->tenant);
    info.server_authenticated = true;
  }
  if (cipher != Cipher::kNone) info.keys = SessionKeys{cipher, keys.c2s, keys.s2c};
  info.data_key = keys.data_key;
  return info;
}

// ---- server -----------------------------------------------------------------------------

struct ServerHandshake::State {
  ServerAuthPolicy policy;
  ServerConnectionInfo conn;
  KeyExchange kx;
  Derived keys;
  AuthenticatedPeer peer;
  Cipher cipher = Cipher::kNone;
  bool hello_done = false;
};

ServerHandshake::ServerHandshake(const ServerAuthPolicy& policy, ServerConnectionInfo conn)
    : s_(std::make_unique<State>()) {
  s_->policy = policy;
  s_->conn = conn;
}

ServerHandshake::~ServerHandshake() = default;

std::vector<uint64_t> RefusalBody(Err code, std::string_view message) {
  ScratchMessage msg;
  auto r = msg.InitRoot<wire::HandshakeMessage>().initRefusal();
  r.setError(static_cast<uint32_t>(code));
  r.setMessage(std::string(message));
  return Copy(msg.Flatten());
}

Result<std::vector<uint64_t>> ServerHandshake::OnHello(std::span<const uint64_t> body) {
  State& s = *s_;
  auto refuse = [&](Err code, const std::string& client, Status log) -> Status {
    refusal_ = RefusalBody(code, client);
    return log;
  };
  if (s.hello_done) return refuse(Err::kInvalidValue, "unexpected Hello", Error(Err::kInvalidValue, "a second Hello"));
  s.hello_done = true;
  if (body.size() > kMaxHandshakeBodyWords)
    return refuse(Err::kInvalidValue, "Hello too large", Error(Err::kInvalidValue, "a Hello of {} bytes", body.size_bytes()));
  uint32_t version = 0;
  std::array<uint8_t, kShareBytes> client_share{};
  EncryptMode client_mode = EncryptMode::kOff;
  uint32_t client_ciphers = 0;
  std::string tenant;
  Status st = GuardDecode("Hello", [&]() -> Status {
    BodyReader r(body);
    auto m = r.Root<wire::HandshakeMessage>();
    if (!m.isHello()) return Error(Err::kInvalidValue, "expected a Hello");
    auto h = m.getHello();
    version = h.getProtocolVersion();
    if (version != wire::PROTOCOL_VERSION) return Status::Ok();
    auto t = h.getTenant();
    tenant.assign(t.begin(), t.size());
    // Validated before anything else uses or logs it.
    if (!tenant.empty()) RETURN_IF_ERROR(ValidateTenantName(tenant));
    auto id = h.getClient();
    auto field = [](capnp::Text::Reader f, const char* what, std::string* out) -> Status {
      if (f.size() > kMaxIdentityBytes)
        return Error(Err::kInvalidValue, "client {} of {} bytes (at most {})", what, f.size(), kMaxIdentityBytes);
      out->assign(f.begin(), f.size());
      return Status::Ok();
    };
    RETURN_IF_ERROR(field(id.getHostname(), "hostname", &s.peer.client.hostname));
    RETURN_IF_ERROR(field(id.getProgram(), "program name", &s.peer.client.program));
    RETURN_IF_ERROR(field(id.getUser(), "user name", &s.peer.client.user));
    RETURN_IF_ERROR(field(h.getShimVersion(), "version", &s.peer.shim_version));
    s.peer.client.pid = id.getPid();
    if (h.getClientNonce().size() != sizeof(Nonce)) return Error(Err::kInvalidValue, "bad client nonce");
    if (!CopyData(h.getKeyShare(), &client_share)) return Error(Err::kInvalidValue, "bad key share");
    uint8_t e = h.getEncrypt();
    if (e > static_cast<uint8_t>(EncryptMode::kOn)) return Error(Err::kInvalidValue, "bad encryption mode");
    client_mode = static_cast<EncryptMode>(e);
    client_ciphers = h.getCiphers();
    s.peer.data_streams_wanted = std::min<uint32_t>(h.getDataStreams(), kMaxDataStreams);
    s.peer.window = h.getWindow();
    s.peer.locate = h.getLocate();
    return Status::Ok();
  });
  if (!st.ok()) return refuse(Err::kInvalidValue, st.message(), st);
  if (version != wire::PROTOCOL_VERSION) {
    Status v = Error(Err::kNoDevice, "protocol version {} is not supported (this server speaks {}, version {})", version,
                     wire::PROTOCOL_VERSION, s.policy.server_version);
    return refuse(v.code(), v.message(), v);
  }

  // Encryption: required by either side wins, refused by either side too; otherwise TCP to
  // a peer that is not on this host is encrypted.
  EncryptMode server_mode = s.policy.encrypt;
  bool encrypt = false;
  if (s.conn.can_encrypt) {
    if ((client_mode == EncryptMode::kOn && server_mode == EncryptMode::kOff) ||
        (client_mode == EncryptMode::kOff && server_mode == EncryptMode::kOn)) {
      Status e = Error(Err::kNoDevice, "this server {} encryption and the client {} it",
                       server_mode == EncryptMode::kOn ? "requires" : "refuses",
                       client_mode == EncryptMode::kOn ? "requires" : "refuses");
      return refuse(e.code(), e.message(), e);
    }
    if (client_mode == EncryptMode::kOn || server_mode == EncryptMode::kOn) encrypt = true;
    else if (client_mode == EncryptMode::kOff || server_mode == EncryptMode::kOff) encrypt = false;
    else encrypt = !s.conn.loopback;
  } else if (client_mode == EncryptMode::kOn) {
    Status e = Error(Err::kNoDevice, "the client requires encryption, which this transport does not provide");
    return refuse(e.code(), e.message(), e);
  }
  if (encrypt) {
    s.cipher = BestCommonCipher(client_ciphers);
    if (s.cipher == Cipher::kNone) {
      Status e = Error(Err::kNoDevice, "no record cipher in common with the client");
      return refuse(e.code(), e.message(), e);
    }
  }
  s.peer.tenant = tenant;

  Nonce server_nonce = RandomNonce();
  std::vector<uint64_t> challenge;
  {
    ScratchMessage msg;
    auto ch = msg.InitRoot<wire::HandshakeMessage>().initChallenge();
    ch.setServerNonce(AsData(server_nonce.data(), server_nonce.size()));
    ch.setAuthRequired(s.policy.auth_required);
    ch.setServerVersion(s.policy.server_version);
    ch.setKeyShare(AsData(s.kx.share.data(), s.kx.share.size()));
    ch.setCipher(static_cast<uint8_t>(s.cipher));
    challenge = Copy(msg.Flatten());
  }
  if (!Derive(s.kx, client_share, body, challenge, &s.keys)) {
    Status e = Error(Err::kInvalidValue, "the client's key share is invalid");
    return refuse(e.code(), e.message(), e);
  }
  return challenge;
}

Result<AuthenticatedPeer> ServerHandshake::OnProof(std::span<const uint64_t> body) {
  State& s = *s_;
  auto refuse = [&](Err code, const std::string& client, Status log) -> Status {
    refusal_ = RefusalBody(code, client);
    return log;
  };
  if (!s.hello_done || body.size() > kMaxHandshakeBodyWords)
    return refuse(Err::kInvalidValue, "unexpected Proof", Error(Err::kInvalidValue, "an unexpected Proof"));
  Key proof{};
  bool opened = false;
  Status st = GuardDecode("Proof", [&]() -> Status {
    BodyReader r(body);
    auto m = r.Root<wire::HandshakeMessage>();
    if (!m.isProof()) return Error(Err::kInvalidValue, "expected a Proof");
    auto sealed = m.getProof().getSealedProof();
    opened = OpenProof(sealed.begin(), sealed.size(), s.keys.proof_key, &proof);
    return Status::Ok();
  });
  if (!st.ok()) return refuse(Err::kInvalidValue, st.message(), st);
  const PeerIdentity& c = s.peer.client;
  if (!opened)
    return refuse(Err::kNoDevice, "authentication failed: the handshake was altered in transit",
                  Error(Err::kNoDevice, "the Proof does not open with this exchange's key (altered or relayed "
                                        "handshake) from {}@{} pid {}", c.user, c.hostname, c.pid));
  if (s.cipher != Cipher::kNone) s.peer.keys = SessionKeys{s.cipher, s.keys.c2s, s.keys.s2c};
  s.peer.data_key = s.keys.data_key;
  if (!s.policy.auth_required) {
    s.peer.tenant = s.policy.anonymous_tenant;
    return s.peer;
  }
  if (s.peer.tenant.empty()) {
    Status e(Err::kNoDevice, "this Remora server requires a tenant token (REMORA_TOKEN or REMORA_TOKEN_FILE)");
    return refuse(e.code(), e.message(), e);
  }
  std::optional<TenantVerifier> found = s.policy.keys ? s.policy.keys->Lookup(s.peer.tenant) : std::nullopt;
  // Unknown tenants are checked against a dummy verifier: the same work, the same answer.
  const TenantVerifier& v = found ? *found : DummyVerifier();
  std::string auth_message = AuthMessage(s.peer.tenant, s.keys.binding);
  bool ok = VerifyProof(v.stored_key, auth_message, proof);
  if (!ok || !found)
    return refuse(Err::kNoDevice,
                  fmt::format("authentication failed for tenant '{}': unknown tenant or wrong token", s.peer.tenant),
                  Error(Err::kNoDevice, "authentication failed for tenant '{}' ({}) from {}@{} pid {}", s.peer.tenant,
                        found ? "wrong token" : "no such tenant", c.user, c.hostname, c.pid));
  s.peer.auth_message = std::move(auth_message);
  s.peer.server_key = v.server_key;
  return s.peer;
}

std::vector<uint64_t> WelcomeBody(const AuthenticatedPeer& peer, const SessionInfo& info) {
  ScratchMessage msg;
  auto w = msg.InitRoot<wire::HandshakeMessage>().initWelcome();
  w.setSessionId(info.session_id);
  w.setTenant(info.tenant);
  w.setBackend(info.backend);
  w.setEmulated(info.emulated);
  w.setServerName(info.server_name);
  w.setDriverVersion(info.driver_version);
  w.setKernelDriver(info.kernel_driver);
  w.setDataStreams(static_cast<uint8_t>(std::min(info.data_streams, kMaxDataStreams)));
  if (!info.pool_servers.empty()) {
    auto servers = w.initPoolServers(static_cast<unsigned>(info.pool_servers.size()));
    auto gpus = w.initPoolGpus(static_cast<unsigned>(info.pool_servers.size()));
    for (size_t i = 0; i < info.pool_servers.size(); i++) {
      servers.set(static_cast<unsigned>(i), info.pool_servers[i].first);
      gpus.set(static_cast<unsigned>(i), info.pool_servers[i].second);
    }
  }
  if (peer.server_key && !peer.auth_message.empty()) {
    Key sig = ServerSignature(*peer.server_key, WelcomeMessage(peer.auth_message, info));
    w.setServerSignature(AsData(sig.data(), sig.size()));
  }
  return Copy(msg.Flatten());
}

Status SendRefusal(FrameSocket& sock, Err code, std::string_view message) {
  return WriteBody(sock, RefusalBody(code, message));
}

Status SendWelcome(FrameSocket& sock, const AuthenticatedPeer& peer, const SessionInfo& info) {
  return WriteBody(sock, WelcomeBody(peer, info));
}

// ---- data connections -----------------------------------------------------------------

Status RunDataHello(FrameSocket& sock, const SessionInfo& info, uint32_t index, int timeout_ms) {
  {
    ScratchMessage msg;
    auto d = msg.InitRoot<wire::HandshakeMessage>().initDataHello();
    d.setSessionId(info.session_id);
    d.setIndex(static_cast<uint8_t>(index));
    auto mac = DataMac(info.data_key, info.session_id, index);
    d.setMac(AsData(mac.data(), mac.size()));
    RETURN_IF_ERROR(WriteBody(sock, msg.Flatten()));
  }
  ASSIGN_OR_RETURN(InFrame answer, sock.Read(timeout_ms, nullptr, kMaxHandshakeBodyWords));
  return GuardDecode("handshake", [&]() -> Status {
    if (answer.kind() != FrameKind::kHandshake) return Error(Err::kInvalidValue, "expected a handshake frame");
    BodyReader r(answer.body);
    auto m = r.Root<wire::HandshakeMessage>();
    if (m.isRefusal()) return Refused(m.getRefusal().getMessage(), m.getRefusal().getError());
    if (!m.isDataAccepted()) return Error(Err::kInvalidValue, "expected dataAccepted");
    return Status::Ok();
  });
}

Result<std::optional<DataHello>> ParseDataHello(std::span<const uint64_t> body) {
  std::optional<DataHello> out;
  Status st = GuardDecode("DataHello", [&]() -> Status {
    BodyReader r(body);
    auto m = r.Root<wire::HandshakeMessage>();
    if (!m.isDataHello()) return Status::Ok();
    auto d = m.getDataHello();
    DataHello h;
    h.session_id = d.getSessionId();
    h.index = d.getIndex();
    if (!CopyData(d.getMac(), &h.mac)) return Error(Err::kInvalidValue, "a DataHello with a malformed mac");
    out = h;
    return Status::Ok();
  });
  RETURN_IF_ERROR(st);
  return out;
}

bool CheckDataHello(const DataHello& hello, const SessionKey& data_key) {
  auto want = DataMac(data_key, hello.session_id, hello.index);
  return sodium_memcmp(want.data(), hello.mac.data(), want.size()) == 0;
}

std::vector<uint64_t> DataAcceptedBody() {
  ScratchMessage msg;
  msg.InitRoot<wire::HandshakeMessage>().setDataAccepted();
  return Copy(msg.Flatten());
}

Status SendDataAccepted(FrameSocket& sock) { return WriteBody(sock, DataAcceptedBody()); }

Result<AuthenticatedPeer> RunServerHandshake(FrameSocket& sock, const ServerAuthPolicy& policy,
                                             std::vector<Fd>* hello_fds, int timeout_ms, ServerConnectionInfo conn) {
  ServerHandshake hs(policy, conn);
  auto hello = sock.Read(timeout_ms, hello_fds, kMaxHandshakeBodyWords);
  if (!hello.ok()) {
    // Not a Remora frame (another protocol, another framing version): say so, if the
    // socket still works, before dropping the connection.
    if (hello.status().code() == Err::kInvalidValue) (void)SendRefusal(sock, Err::kInvalidValue, hello.status().message());
    return hello.take_status();
  }
  if (hello->kind() != FrameKind::kHandshake) {
    Status e = Error(Err::kInvalidValue, "expected a handshake frame first");
    (void)SendRefusal(sock, e.code(), e.message());
    return e;
  }
  auto challenge = hs.OnHello(hello->body);
  if (!challenge.ok()) {
    (void)WriteBody(sock, hs.refusal());
    return challenge.take_status();
  }
  RETURN_IF_ERROR(WriteBody(sock, *challenge));
  ASSIGN_OR_RETURN(InFrame proof, sock.Read(timeout_ms, nullptr, kMaxHandshakeBodyWords));
  if (proof.kind() != FrameKind::kHandshake) {
    Status e = Error(Err::kInvalidValue, "expected a handshake frame");
    (void)SendRefusal(sock, e.code(), e.message());
    return e;
  }
  auto peer = hs.OnProof(proof.body);
  if (!peer.ok()) {
    (void)WriteBody(sock, hs.refusal());
    return peer.take_status();
  }
  return peer;
}

}  // namespace remora
