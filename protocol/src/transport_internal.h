// The transport table (NCCL's ncclTransport style): one record per transport, filled at the
// end of that transport's own file, iterated by transport.cc. Nothing else names a transport.
// Private to protocol/.
#pragma once

#include <string>
#include <vector>

#include "remora/protocol/transport.h"

namespace remora {

// The handshake options of a connection with `options` on a transport that can (or cannot)
// encrypt its data path.
ClientHandshakeOptions HandshakeOptions(const ConnectOptions& options, bool can_encrypt);

struct TransportOps {
  const char* scheme;     // the URL scheme, "shm", "tcp", "rdma"
  TransportKind kind;
  const char* data_path;  // how a session's bulk data moves, for listings
  // Client: connect, run the handshake, set up the data path.
  Result<Connected> (*connect)(const Endpoint& ep, const ConnectOptions& options);
  // Server: bind and listen.
  Result<std::unique_ptr<Listener>> (*listen)(const Endpoint& ep, const ListenOptions& options);
  // Worker: the executor side of an authenticated connection (socket and Hello descriptors),
  // encrypted with `keys` if given (kInvalidValue on a transport that cannot); a data path set
  // up with the client waits for it up to client_setup_ms (AdoptConnection).
  Result<std::unique_ptr<Connection>> (*adopt)(Fd socket, std::vector<Fd> fds, const std::optional<SessionKeys>& keys,
                                               int client_setup_ms);
  // Why this transport cannot be used here, or empty.
  std::string (*unavailable)();
};

extern const TransportOps kShmTransport;   // shm/shm_transport.cc
extern const TransportOps kTcpTransport;   // tcp/tcp_transport.cc
extern const TransportOps kRdmaTransport;  // rdma/rdma_transport.cc (rdma_stub.cc without verbs)

// One line for the server log: why rdma:// cannot be served here, or empty if it can.
inline std::string RdmaUnavailableReason() { return kRdmaTransport.unavailable(); }

}  // namespace remora
