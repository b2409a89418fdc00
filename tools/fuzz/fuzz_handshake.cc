// Fuzz targets `handshake_server` and `handshake_client` (this file, built twice with
// REMORA_FUZZ_SERVER_SIDE 1 or 0): the session handshake's state machines facing a hostile
// peer - the supervisor reading Hello and Proof from anyone who can connect, and the shim
// reading Challenge and Welcome from whatever answers at REMORA_SERVER.
//
// Input: one option byte, then the bytes the peer sends (all of them at once, then
// end-of-stream; the side under test writes its own messages into the socket meanwhile).
//   server: bit 0 = authentication required (tenant "alice" exists with a known key)
//   client: bit 0 = the client holds a token for "alice"; bit 1 = its transport can
//           encrypt; bit 2 = it accepts an unauthenticated local server; bit 3 = it would
//           open 4 tcp data connections
// Checks besides memory safety: the server never accepts a peer when authentication is
// required (the proof cannot match: the server's nonce is fresh), and accepts only the
// anonymous tenant when it is not; a client that holds no token never completes against a
// server that demands one.
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "fuzz_input.h"
#include "remora.capnp.h"
#include "remora/protocol/handshake.h"
#include "remora/protocol/message.h"

#ifndef REMORA_FUZZ_SERVER_SIDE
#error "build with -DREMORA_FUZZ_SERVER_SIDE=0 or 1"
#endif

namespace remora::fuzz {
namespace {

constexpr int kTimeoutMs = 1000;  // never reached: the input is all there, then EOF

Secret AliceSecret() {
  Secret s{};
  for (size_t i = 0; i < s.size(); i++) s[i] = static_cast<uint8_t>(i + 1);
  return s;
}

class AliceKeys final : public TenantKeys {
 public:
  std::optional<TenantVerifier> Lookup(std::string_view tenant) override {
    if (tenant != "alice") return std::nullopt;
    Verifier v = VerifierFor(AliceSecret());
    return TenantVerifier{v.stored_key, v.server_key};
  }
};

std::vector<uint8_t> HandshakeFrame(ScratchMessage& msg) {
  auto body = msg.Flatten();
  FrameHeader h;
  h.kind = static_cast<uint16_t>(FrameKind::kHandshake);
  h.body_words = static_cast<uint32_t>(body.size());
  std::vector<uint8_t> out(sizeof(h) + body.size_bytes());
  std::memcpy(out.data(), &h, sizeof(h));
  std::memcpy(out.data() + sizeof(h), body.data(), body.size_bytes());
  return out;
}

std::vector<uint8_t> Hello(uint32_t version, const std::string& tenant) {
  ScratchMessage msg;
  auto h = msg.InitRoot<wire::HandshakeMessage>().initHello();
  h.setProtocolVersion(version);
  h.setTenant(tenant);
  uint8_t nonce[32] = {7};
  h.setClientNonce(capnp::Data::Reader(nonce, sizeof(nonce)));
  h.setShimVersion("0.1.0");
  auto id = h.initClient();
  id.setHostname("client");
  id.setPid(42);
  id.setProgram("app");
  id.setUser("user");
  return HandshakeFrame(msg);
}

std::vector<uint8_t> Proof() {
  ScratchMessage msg;
  uint8_t p[32] = {1, 2, 3};
  msg.InitRoot<wire::HandshakeMessage>().initProof().setClientProof(capnp::Data::Reader(p, sizeof(p)));
  return HandshakeFrame(msg);
}

std::vector<uint8_t> Challenge(bool auth) {
  ScratchMessage msg;
  auto c = msg.InitRoot<wire::HandshakeMessage>().initChallenge();
  uint8_t nonce[32] = {9};
  c.setServerNonce(capnp::Data::Reader(nonce, sizeof(nonce)));
  c.setAuthRequired(auth);
  c.setServerVersion("0.1.0");
  return HandshakeFrame(msg);
}

std::vector<uint8_t> Welcome() {
  ScratchMessage msg;
  auto w = msg.InitRoot<wire::HandshakeMessage>().initWelcome();
  w.setSessionId(1);
  w.setTenant("alice");
  w.setBackend("host-emulated");
  w.setEmulated(true);
  w.setServerName("server");
  w.setDriverVersion(13000);
  return HandshakeFrame(msg);
}

std::vector<uint8_t> Refusal() {
  ScratchMessage msg;
  auto r = msg.InitRoot<wire::HandshakeMessage>().initRefusal();
  r.setError(100);
  r.setMessage("no");
  return HandshakeFrame(msg);
}

const Seeds& MakeSeeds() {
  static const Seeds seeds = [] {
    Seeds s;
    auto add = [&](const std::string& name, uint8_t opts, std::vector<std::vector<uint8_t>> frames) {
      SeedWriter w;
      w.Put(opts);
      for (auto& f : frames) w.Bytes(f.data(), f.size());
      s.emplace_back(name, w.bytes());
    };
    if (REMORA_FUZZ_SERVER_SIDE) {
      add("anonymous", 0, {Hello(wire::PROTOCOL_VERSION, ""), Proof()});
      add("alice-wrong-proof", 1, {Hello(wire::PROTOCOL_VERSION, "alice"), Proof()});
      add("unknown-tenant", 1, {Hello(wire::PROTOCOL_VERSION, "mallory"), Proof()});
      add("old-version", 0, {Hello(0, "alice"), Proof()});
      add("hello-only", 1, {Hello(wire::PROTOCOL_VERSION, "alice")});
    } else {
      add("anonymous-welcome", 0, {Challenge(false), Welcome()});
      add("token-welcome", 1, {Challenge(true), Welcome()});
      add("refused-at-once", 1, {Refusal()});
      add("refused-after-proof", 1, {Challenge(true), Refusal()});
      add("challenge-only", 0, {Challenge(false)});
    }
    return s;
  }();
  return seeds;
}

}  // namespace
}  // namespace remora::fuzz

REMORA_FUZZ_SEEDS(remora::fuzz::MakeSeeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace remora;
  fuzz::FuzzInput in(data, size);
  uint8_t opts = in.Byte();
  auto bytes = in.Rest();
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return 0;
  int sz = 1 << 20;
  ::setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
  ::setsockopt(sv[0], SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t w = ::write(sv[1], bytes.data() + off, bytes.size() - off);
    if (w <= 0) break;
    off += static_cast<size_t>(w);
  }
  ::shutdown(sv[1], SHUT_WR);
  Fd mine(sv[0]), peer(sv[1]);
  FrameSocket sock(mine.get());
#if REMORA_FUZZ_SERVER_SIDE
  fuzz::AliceKeys keys;
  ServerAuthPolicy policy;
  policy.auth_required = (opts & 1) != 0;
  policy.keys = &keys;
  policy.server_version = "fuzz";
  std::vector<Fd> fds;
  auto peer_ok = RunServerHandshake(sock, policy, &fds, fuzz::kTimeoutMs);
  if (peer_ok.ok()) {
    if (policy.auth_required) fuzz::Finding("the server accepted a proof made without the secret", peer_ok->tenant);
    if (peer_ok->tenant != policy.anonymous_tenant) fuzz::Finding("an anonymous session got a tenant", peer_ok->tenant);
  }
#else
  ClientHandshakeOptions options;
  if (opts & 1) options.token = Token{"alice", fuzz::AliceSecret()};
  options.can_encrypt = (opts & 2) != 0;
  options.insecure_local = (opts & 4) != 0;
  options.data_streams = (opts & 8) != 0 ? 4 : 0;
  auto info = RunClientHandshake(sock, options, {}, fuzz::kTimeoutMs);
  (void)info;
#endif
  return 0;
}
