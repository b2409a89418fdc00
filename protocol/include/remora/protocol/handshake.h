// The session handshake (docs/PROTOCOL.md): Hello -> Challenge -> Proof -> Welcome|Refusal,
// run over a stream socket before a transport switches to its data path.
//
// Both ends contribute an ephemeral X25519 key; the transcript (Hello and Challenge bodies)
// and the shared secret give a proof key, the data-path keys and a channel binding. The
// client's SCRAM proof is bound to that binding and travels sealed under the proof key; the
// server answers with a signature that only a holder of the tenant's ServerKey can make. A
// relay that forwards the messages cannot compute the keys; one that substitutes its own
// key shares breaks the binding, and the proof fails.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "remora/base/fd.h"
#include "remora/base/status.h"
#include "remora/protocol/auth.h"
#include "remora/protocol/frame_socket.h"
#include "remora/protocol/secure.h"

namespace remora {

// A locate answer names at most this many servers (a client uses at most 16).
inline constexpr size_t kMaxPoolServers = 64;
// Each identity field a client reports is at most this many bytes.
inline constexpr size_t kMaxIdentityBytes = 64;
// The largest Hello or Proof body a server reads, in words (4 KiB).
inline constexpr uint32_t kMaxHandshakeBodyWords = 512;

struct PeerIdentity {
  std::string hostname;
  uint32_t pid = 0;
  std::string program;
  std::string user;
};

// This process's identity (hostname, pid, program name, user), each field cut to
// kMaxIdentityBytes.
PeerIdentity LocalIdentity();

struct SessionInfo {
  uint64_t session_id = 0;
  std::string tenant;
  std::string backend;  // "cuda" or "host-emulated"
  bool emulated = false;
  std::string server_name;
  int32_t driver_version = 0;  // the server's CUDA driver version (13000 when emulated)
  std::string kernel_driver;   // the server's kernel-mode driver version ("580.159.04"; empty when emulated)
  bool server_authenticated = false;  // the server proved it knows the tenant's key
  std::optional<SessionKeys> keys;    // set when the data path is encrypted
  // tcp: the parallel data connections the client opens next (0: bulk stays on the control
  // connection), and the key that proves they belong to this session (DataMac).
  uint32_t data_streams = 0;
  SessionKey data_key{};
  // A locate handshake's answer (pool:// clients): the servers holding the tenant's GPUs, in
  // the order its devices are numbered, with how many each has. Signed with the Welcome.
  std::vector<std::pair<std::string, uint32_t>> pool_servers;
};

// ---- client -------------------------------------------------------------------------
struct ClientHandshakeOptions {
  std::optional<Token> token;  // absent: servers started with --auth none only
  EncryptMode encrypt = EncryptMode::kAuto;
  // The transport can encrypt its data path (tcp). Without, REMORA_ENCRYPT=on fails here.
  bool can_encrypt = false;
  // Accept a server that declines to authenticate although we hold a token (a private
  // server this user started, REMORA_INSECURE_LOCAL=1). Never the default.
  bool insecure_local = false;
  // tcp: how many parallel data connections this client would open (0: none).
  uint32_t data_streams = 0;
  // The window the session's handles and emulated device addresses are minted in (Hello.window).
  uint8_t window = 0;
  // Ask where the tenant's GPUs are in a pool instead of opening a session (Hello.locate).
  bool locate = false;
};

// `fds` travel with the Hello. A refusal comes back as its Status (kNoDevice for
// authentication failures, of either side).
Result<SessionInfo> RunClientHandshake(FrameSocket& sock, const ClientHandshakeOptions& options,
                                       std::span<const int> fds, int timeout_ms);

// ---- server -------------------------------------------------------------------------
// What a server stores of a tenant's token.
struct TenantVerifier {
  Key stored_key{};
  std::optional<Key> server_key;  // absent for tenants created before protocol 2
};

// The supervisor looks tenants up through this interface (its state store).
class TenantKeys {
 public:
  virtual ~TenantKeys() = default;
  // The tenant's verifier, or nullopt if no such tenant exists. Thread-safe.
  virtual std::optional<TenantVerifier> Lookup(std::string_view tenant) = 0;
};

struct ServerAuthPolicy {
  bool auth_required = true;
  TenantKeys* keys = nullptr;             // required when auth_required
  std::string anonymous_tenant = "local"; // the tenant of every session when !auth_required
  std::string server_version;
  EncryptMode encrypt = EncryptMode::kAuto;
};

// What the server knows of the transport a handshake runs on.
struct ServerConnectionInfo {
  bool can_encrypt = false;  // tcp: the worker can encrypt the data path
  bool loopback = false;     // the peer address is a loopback address
};

struct AuthenticatedPeer {
  std::string tenant;
  PeerIdentity client;
  std::string shim_version;
  std::optional<SessionKeys> keys;  // the data path is encrypted with these
  // For the Welcome's signature (empty without authentication).
  std::string auth_message;
  std::optional<Key> server_key;
  uint32_t data_streams_wanted = 0;  // the client's Hello.dataStreams
  uint8_t window = 0;                // the client's Hello.window
  SessionKey data_key{};             // authenticates the session's data connections
  bool locate = false;               // the client's Hello.locate: answer where, open no session
};

// The server's side as a state machine, for an event loop: feed it the bodies of the
// client's frames, send what it returns. Not thread-safe; one per connection.
class ServerHandshake {
 public:
  ServerHandshake(const ServerAuthPolicy& policy, ServerConnectionInfo conn);
  ~ServerHandshake();
  ServerHandshake(const ServerHandshake&) = delete;
  ServerHandshake& operator=(const ServerHandshake&) = delete;

  // The Hello's body: returns the Challenge's body. On failure the Status says why (for the
  // server's log) and refusal() is what to send the client.
  Result<std::vector<uint64_t>> OnHello(std::span<const uint64_t> body);
  // The Proof's body: the authenticated peer, or a failure as for OnHello. Every proof,
  // for known and unknown tenants alike, is checked the same way (no timing difference).
  Result<AuthenticatedPeer> OnProof(std::span<const uint64_t> body);
  // The Refusal body to send after a failure.
  const std::vector<uint64_t>& refusal() const { return refusal_; }

 private:
  struct State;
  std::unique_ptr<State> s_;
  std::vector<uint64_t> refusal_;
};

// Body of a Welcome (signed when the peer authenticated) or a Refusal.
std::vector<uint64_t> WelcomeBody(const AuthenticatedPeer& peer, const SessionInfo& info);
std::vector<uint64_t> RefusalBody(Err code, std::string_view message);

// Blocking server side over a FrameSocket (tests and tools): reads at most
// kMaxHandshakeBodyWords per message; sends a Refusal itself on failure.
Result<AuthenticatedPeer> RunServerHandshake(FrameSocket& sock, const ServerAuthPolicy& policy,
                                             std::vector<Fd>* hello_fds, int timeout_ms,
                                             ServerConnectionInfo conn = {});
Status SendWelcome(FrameSocket& sock, const AuthenticatedPeer& peer, const SessionInfo& info);

// ---- data connections (tcp) ------------------------------------------------------------
// The most data connections a session has, whatever both ends ask for.
inline constexpr uint32_t kMaxDataStreams = 16;

// Client: joins the session `info` (after its Welcome) on a fresh connection as data stream
// `index`: sends the DataHello and waits for dataAccepted. A refusal comes back as its Status.
Status RunDataHello(FrameSocket& sock, const SessionInfo& info, uint32_t index, int timeout_ms);

// Server: a DataHello's content.
struct DataHello {
  uint64_t session_id = 0;
  uint32_t index = 0;
  std::array<uint8_t, 32> mac{};
};
// The DataHello in a first handshake message, nullopt if it is another message (a Hello);
// kInvalidValue if it is a malformed DataHello.
Result<std::optional<DataHello>> ParseDataHello(std::span<const uint64_t> body);
// True if `hello` proves knowledge of `data_key` (constant time).
bool CheckDataHello(const DataHello& hello, const SessionKey& data_key);
std::vector<uint64_t> DataAcceptedBody();
Status SendDataAccepted(FrameSocket& sock);
Status SendRefusal(FrameSocket& sock, Err code, std::string_view message);

}  // namespace remora
