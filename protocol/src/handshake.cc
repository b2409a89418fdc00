#include "remora/protocol/handshake.h"

#include <pwd.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include "remora.capnp.h"
#include "remora/protocol/message.h"

namespace remora {
namespace {

Status WriteHandshake(FrameSocket& sock, ScratchMessage& msg, std::span<const int> fds = {}) {
  OutFrame f;
  f.kind = FrameKind::kHandshake;
  f.body = msg.Flatten();
  return sock.Write(f, {}, fds);
}

template <size_t N>
bool CopyData(capnp::Data::Reader d, std::array<uint8_t, N>* out) {
  if (d.size() != N) return false;
  std::memcpy(out->data(), d.begin(), N);
  return true;
}

capnp::Data::Reader AsData(const uint8_t* p, size_t n) { return capnp::Data::Reader(p, n); }

}  // namespace

PeerIdentity LocalIdentity() {
  PeerIdentity id;
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) == 0) id.hostname = host;
  id.pid = static_cast<uint32_t>(getpid());
  std::ifstream comm("/proc/self/comm");
  std::getline(comm, id.program);
  struct passwd pw, *res = nullptr;
  char buf[1024];
  if (getpwuid_r(getuid(), &pw, buf, sizeof(buf), &res) == 0 && res != nullptr) id.user = res->pw_name;
  else id.user = std::to_string(getuid());
  return id;
}

Result<SessionInfo> RunClientHandshake(FrameSocket& sock, const std::optional<Token>& token,
                                       std::span<const int> fds, int timeout_ms) {
  Nonce client_nonce = RandomNonce();
  std::string tenant = token ? token->tenant : std::string();
  {
    ScratchMessage msg;
    auto hello = msg.InitRoot<wire::HandshakeMessage>().initHello();
    hello.setProtocolVersion(wire::PROTOCOL_VERSION);
    hello.setTenant(tenant);
    hello.setClientNonce(AsData(client_nonce.data(), client_nonce.size()));
    hello.setShimVersion(REMORA_VERSION);
    PeerIdentity me = LocalIdentity();
    auto id = hello.initClient();
    id.setHostname(me.hostname);
    id.setPid(me.pid);
    id.setProgram(me.program);
    id.setUser(me.user);
    RETURN_IF_ERROR(WriteHandshake(sock, msg, fds));
  }

  Nonce server_nonce{};
  bool auth_required = false;
  ASSIGN_OR_RETURN(InFrame challenge_frame, sock.Read(timeout_ms));
  Status st = GuardDecode("handshake", [&]() -> Status {
    if (challenge_frame.kind() != FrameKind::kHandshake) return Error(Err::kInvalidValue, "expected a handshake frame");
    BodyReader r(challenge_frame.body);
    auto m = r.Root<wire::HandshakeMessage>();
    if (m.isRefusal()) {
      auto ref = m.getRefusal();
      return Status(static_cast<Err>(ref.getError()), std::string("server refused the session: ") + ref.getMessage().cStr());
    }
    if (!m.isChallenge()) return Error(Err::kInvalidValue, "expected a Challenge");
    auto ch = m.getChallenge();
    if (!CopyData(ch.getServerNonce(), &server_nonce)) return Error(Err::kInvalidValue, "bad server nonce");
    auth_required = ch.getAuthRequired();
    return Status::Ok();
  });
  RETURN_IF_ERROR(st);
  if (auth_required && !token)
    return Error(Err::kNoDevice,
                 "the Remora server requires a tenant token: set REMORA_TOKEN or REMORA_TOKEN_FILE");

  {
    ScratchMessage msg;
    auto proof = msg.InitRoot<wire::HandshakeMessage>().initProof();
    Key p{};
    if (token) p = ClientProof(token->secret, token->tenant, client_nonce, server_nonce);
    proof.setClientProof(AsData(p.data(), p.size()));
    RETURN_IF_ERROR(WriteHandshake(sock, msg));
  }

  ASSIGN_OR_RETURN(InFrame welcome_frame, sock.Read(timeout_ms));
  SessionInfo info;
  st = GuardDecode("handshake", [&]() -> Status {
    if (welcome_frame.kind() != FrameKind::kHandshake) return Error(Err::kInvalidValue, "expected a handshake frame");
    BodyReader r(welcome_frame.body);
    auto m = r.Root<wire::HandshakeMessage>();
    if (m.isRefusal()) {
      auto ref = m.getRefusal();
      return Status(static_cast<Err>(ref.getError()), std::string("server refused the session: ") + ref.getMessage().cStr());
    }
    if (!m.isWelcome()) return Error(Err::kInvalidValue, "expected a Welcome");
    auto w = m.getWelcome();
    info.session_id = w.getSessionId();
    info.tenant = w.getTenant();
    info.backend = w.getBackend();
    info.emulated = w.getEmulated();
    info.server_name = w.getServerName();
    info.driver_version = w.getDriverVersion();
    return Status::Ok();
  });
  RETURN_IF_ERROR(st);
  return info;
}

Status SendRefusal(FrameSocket& sock, Err code, std::string_view message) {
  ScratchMessage msg;
  auto r = msg.InitRoot<wire::HandshakeMessage>().initRefusal();
  r.setError(static_cast<uint32_t>(code));
  r.setMessage(std::string(message));
  return WriteHandshake(sock, msg);
}

Status SendWelcome(FrameSocket& sock, const SessionInfo& info) {
  ScratchMessage msg;
  auto w = msg.InitRoot<wire::HandshakeMessage>().initWelcome();
  w.setSessionId(info.session_id);
  w.setTenant(info.tenant);
  w.setBackend(info.backend);
  w.setEmulated(info.emulated);
  w.setServerName(info.server_name);
  w.setDriverVersion(info.driver_version);
  return WriteHandshake(sock, msg);
}

Result<AuthenticatedPeer> RunServerHandshake(FrameSocket& sock, const ServerAuthPolicy& policy,
                                             std::vector<Fd>* hello_fds, int timeout_ms) {
  auto hello_read = sock.Read(timeout_ms, hello_fds);
  if (!hello_read.ok()) {
    // Not a Remora frame (another protocol, another framing version): say so, if the
    // socket still works, before dropping the connection.
    if (hello_read.status().code() == Err::kInvalidValue)
      (void)SendRefusal(sock, Err::kInvalidValue, hello_read.status().message());
    return hello_read.take_status();
  }
  InFrame hello_frame = *hello_read;
  AuthenticatedPeer peer;
  Nonce client_nonce{};
  uint32_t version = 0;
  Status st = GuardDecode("Hello", [&]() -> Status {
    if (hello_frame.kind() != FrameKind::kHandshake) return Error(Err::kInvalidValue, "expected a handshake frame first");
    BodyReader r(hello_frame.body);
    auto m = r.Root<wire::HandshakeMessage>();
    if (!m.isHello()) return Error(Err::kInvalidValue, "expected a Hello");
    auto h = m.getHello();
    version = h.getProtocolVersion();
    peer.tenant = h.getTenant();
    if (!CopyData(h.getClientNonce(), &client_nonce)) return Error(Err::kInvalidValue, "bad client nonce");
    auto id = h.getClient();
    peer.client.hostname = id.getHostname();
    peer.client.pid = id.getPid();
    peer.client.program = id.getProgram();
    peer.client.user = id.getUser();
    peer.shim_version = h.getShimVersion();
    return Status::Ok();
  });
  if (!st.ok()) {
    (void)SendRefusal(sock, Err::kInvalidValue, st.message());
    return st;
  }
  if (version != wire::PROTOCOL_VERSION) {
    Status v = Error(Err::kNoDevice, "protocol version {} is not supported (this server speaks {}, version {})",
                     version, wire::PROTOCOL_VERSION, policy.server_version);
    (void)SendRefusal(sock, v.code(), v.message());
    return v;
  }

  Nonce server_nonce = RandomNonce();
  {
    ScratchMessage msg;
    auto ch = msg.InitRoot<wire::HandshakeMessage>().initChallenge();
    ch.setServerNonce(AsData(server_nonce.data(), server_nonce.size()));
    ch.setAuthRequired(policy.auth_required);
    ch.setServerVersion(policy.server_version);
    RETURN_IF_ERROR(WriteHandshake(sock, msg));
  }

  ASSIGN_OR_RETURN(InFrame proof_frame, sock.Read(timeout_ms));
  Key proof{};
  st = GuardDecode("Proof", [&]() -> Status {
    if (proof_frame.kind() != FrameKind::kHandshake) return Error(Err::kInvalidValue, "expected a handshake frame");
    BodyReader r(proof_frame.body);
    auto m = r.Root<wire::HandshakeMessage>();
    if (!m.isProof()) return Error(Err::kInvalidValue, "expected a Proof");
    if (!CopyData(m.getProof().getClientProof(), &proof)) return Error(Err::kInvalidValue, "bad proof length");
    return Status::Ok();
  });
  if (!st.ok()) {
    (void)SendRefusal(sock, Err::kInvalidValue, st.message());
    return st;
  }

  if (!policy.auth_required) {
    peer.tenant = policy.anonymous_tenant;
    return peer;
  }
  if (peer.tenant.empty()) {
    Status s(Err::kNoDevice, "this Remora server requires a tenant token (REMORA_TOKEN or REMORA_TOKEN_FILE)");
    (void)SendRefusal(sock, s.code(), s.message());
    return s;
  }
  std::optional<Key> stored = policy.keys ? policy.keys->StoredKey(peer.tenant) : std::nullopt;
  // Unknown tenant and wrong token look the same to the client; the log tells them apart.
  if (!stored || !VerifyProof(*stored, peer.tenant, client_nonce, server_nonce, proof)) {
    (void)SendRefusal(sock, Err::kNoDevice,
                      fmt::format("authentication failed for tenant '{}': unknown tenant or wrong token", peer.tenant));
    return Error(Err::kNoDevice, "authentication failed for tenant '{}' ({}) from {}@{} pid {}", peer.tenant,
                 stored ? "wrong token" : "no such tenant", peer.client.user, peer.client.hostname, peer.client.pid);
  }
  return peer;
}

}  // namespace remora
