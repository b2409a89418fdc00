// Endpoints, connecting (client), listening and adopting (server). The transports live
// behind these functions and the Connection interface; nothing else names them.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "remora/base/fd.h"
#include "remora/base/status.h"
#include "remora/protocol/auth.h"
#include "remora/protocol/connection.h"
#include "remora/protocol/handshake.h"

namespace remora {

enum class TransportKind { kShm, kTcp, kRdma };
// The URL scheme ("shm"), and back.
const char* TransportName(TransportKind kind);
Result<TransportKind> TransportFromName(std::string_view name);
// How a session's bulk data moves over this transport ("shared-memory", "socket", ...).
const char* TransportDataPath(TransportKind kind);
// Why `kind` cannot be used on this machine, or empty.
std::string TransportUnavailable(TransportKind kind);

struct Endpoint {
  TransportKind kind = TransportKind::kShm;
  std::string path;  // shm: the unix socket path
  std::string host;  // tcp/rdma
  uint16_t port = 0;
  std::string ToUrl() const;
};

// shm:///path/to.sock, tcp://HOST:PORT, rdma://HOST:PORT ([v6] hosts in brackets).
Result<Endpoint> ParseEndpoint(std::string_view url);

// ---- client -------------------------------------------------------------------------
struct ConnectOptions {
  std::optional<Token> token;
  int timeout_ms = 15000;
};

struct Connected {
  std::unique_ptr<Connection> connection;
  SessionInfo session;
};

// Connects, runs the handshake and sets up the transport's data path.
Result<Connected> Connect(const Endpoint& endpoint, const ConnectOptions& options);

// ---- server -------------------------------------------------------------------------
// An accepted connection between accept() and its handoff to a worker process.
struct PendingConnection {
  TransportKind kind = TransportKind::kShm;
  Fd socket;               // the handshake runs on it; it goes to the worker afterwards
  std::string peer;        // for logs
  std::vector<Fd> fds;     // descriptors that came with the Hello (the shm segment)
};

class Listener {
 public:
  virtual ~Listener() = default;
  virtual int fd() const = 0;  // readable when Accept will not block
  virtual const Endpoint& endpoint() const = 0;
  virtual Result<PendingConnection> Accept() = 0;
};

// Binds and listens. For shm the socket file is created with mode 0666 inside the caller's
// directory (access is governed by the directory and by authentication); a stale socket
// file is replaced only if nothing answers on it.
Result<std::unique_ptr<Listener>> Listen(const Endpoint& endpoint);

// In the worker: builds the executor side of an authenticated connection from the handed-off
// socket and descriptors (after the supervisor sent Welcome).
Result<std::unique_ptr<Connection>> AdoptConnection(TransportKind kind, Fd socket, std::vector<Fd> fds);

// In-process pair for unit tests: {requester side, executor side}.
std::pair<std::unique_ptr<Connection>, std::unique_ptr<Connection>> MakePipeConnectionPair();

}  // namespace remora
