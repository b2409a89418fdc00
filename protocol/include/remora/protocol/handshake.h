// The session handshake (docs/PROTOCOL.md): Hello -> Challenge -> Proof -> Welcome|Refusal,
// run over a FrameSocket before a transport switches to its data path.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "remora/base/fd.h"
#include "remora/base/status.h"
#include "remora/protocol/auth.h"
#include "remora/protocol/frame_socket.h"

namespace remora {

struct PeerIdentity {
  std::string hostname;
  uint32_t pid = 0;
  std::string program;
  std::string user;
};

// This process's identity (hostname, pid, program name, user).
PeerIdentity LocalIdentity();

struct SessionInfo {
  uint64_t session_id = 0;
  std::string tenant;
  std::string backend;  // "cuda" or "host-emulated"
  bool emulated = false;
  std::string server_name;
  int32_t driver_version = 0;  // the server's CUDA driver version (13000 when emulated)
};

// Client side. `token` may be absent (servers started with --auth none). `fds` travel with
// the Hello. A refusal comes back as its Status (kNoDevice for authentication failures).
Result<SessionInfo> RunClientHandshake(FrameSocket& sock, const std::optional<Token>& token,
                                       std::span<const int> fds, int timeout_ms);

// Server side: the supervisor looks tenants up through this interface (its state store).
class TenantKeys {
 public:
  virtual ~TenantKeys() = default;
  // The tenant's StoredKey, or nullopt if no such tenant exists. Thread-safe.
  virtual std::optional<Key> StoredKey(std::string_view tenant) = 0;
};

struct ServerAuthPolicy {
  bool auth_required = true;
  TenantKeys* keys = nullptr;             // required when auth_required
  std::string anonymous_tenant = "local"; // the tenant of every session when !auth_required
  std::string server_version;
};

struct AuthenticatedPeer {
  std::string tenant;
  PeerIdentity client;
  std::string shim_version;
};

// Authenticates the peer. On failure a Refusal has already been sent to the client (when
// the socket still works) and the returned Status says why, for the server's log.
Result<AuthenticatedPeer> RunServerHandshake(FrameSocket& sock, const ServerAuthPolicy& policy,
                                             std::vector<Fd>* hello_fds, int timeout_ms);
Status SendWelcome(FrameSocket& sock, const SessionInfo& info);
Status SendRefusal(FrameSocket& sock, Err code, std::string_view message);

}  // namespace remora
