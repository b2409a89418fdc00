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
#include "remora/protocol/secure.h"

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
  // REMORA_ENCRYPT: tcp:// encrypts by default to non-loopback servers (see secure.h).
  EncryptMode encrypt = EncryptMode::kAuto;
  // REMORA_INSECURE_LOCAL: accept a server that does not authenticate although we hold a
  // token (see ClientHandshakeOptions).
  bool insecure_local = false;
  // REMORA_TCP_STREAMS: tcp:// data connections to ask for (0: none; < 0: one per core of
  // this machine, at most kDefaultDataStreams). The server may grant fewer.
  int data_streams = -1;
  // The client's index for this server among several (Hello.window; handle_table.h).
  uint8_t window = 0;
  // Once the handshake is done (the server is there), how long it may take to set up the
  // session's data path (its worker starting; rdma://: the worker's RDMA bootstrap and the
  // connection), if longer than what is left of timeout_ms. The shim sets it to its
  // liveness deadline (REMORA_DEADLINE_S), how long it waits for a silent server anyway.
  int server_setup_ms = 0;
};

// The default count of tcp data connections a client asks for and a server grants.
inline constexpr uint32_t kDefaultDataStreams = 8;
// min(cores, kDefaultDataStreams), at least 1.
uint32_t DefaultDataStreams();
// REMORA_TCP_STREAMS's value: 0..16.
Result<int> ParseTcpStreams(std::string_view text);

struct Connected {
  std::unique_ptr<Connection> connection;
  SessionInfo session;
};

// Connects, runs the handshake and sets up the transport's data path.
Result<Connected> Connect(const Endpoint& endpoint, const ConnectOptions& options);

// Asks a pool's server (tcp://) where the token's tenant has GPUs (a locate handshake, no
// session): each server's client URL and its count of the tenant's GPUs, in the order the
// application's devices are numbered. The server must prove it knows the tenant's token.
Result<std::vector<std::pair<std::string, uint32_t>>> LocatePool(const Endpoint& endpoint, const ConnectOptions& options);

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
  // Errors: kNotReady when nothing is waiting (non-blocking listener); kMemoryAllocation
  // when this process (or the system) is out of descriptors or memory: the connection is
  // still queued, and accepting again at once will fail again.
  virtual Result<PendingConnection> Accept() = 0;
};

// The Status for accept(2) failing with `err` (see Listener::Accept).
Status AcceptError(int err);
// True if `fd` is a socket whose peer is on this host's loopback (127/8, ::1).
bool PeerIsLoopback(int fd);

struct ListenOptions {
  unsigned shm_mode = 0600;  // of the shm socket file, set explicitly whatever the umask
};

// Binds and listens. A stale shm socket file is replaced only if it is a socket of this
// user that nothing answers on.
Result<std::unique_ptr<Listener>> Listen(const Endpoint& endpoint, const ListenOptions& options = {});

// In the worker: builds the executor side of an authenticated connection from the handed-off
// socket and descriptors (after the supervisor sent Welcome), encrypted with `keys` if given.
// A transport that sets its data path up with the client (rdma://: the client's RDMA
// connection) waits for it up to `client_setup_ms`, never less than 15 s (the worker passes
// its session's client deadline, remora-server --deadline).
Result<std::unique_ptr<Connection>> AdoptConnection(TransportKind kind, Fd socket, std::vector<Fd> fds,
                                                    const std::optional<SessionKeys>& keys = std::nullopt,
                                                    int client_setup_ms = 0);

// In-process pair for unit tests: {requester side, executor side}.
std::pair<std::unique_ptr<Connection>, std::unique_ptr<Connection>> MakePipeConnectionPair();

}  // namespace remora
