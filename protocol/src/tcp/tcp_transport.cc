// The tcp transport's entries: the handshake and then frames on one stream socket
// (tcp_connection.cc).
#include "remora/protocol/frame_socket.h"
#include "tcp/tcp_connection.h"
#include "transport_internal.h"

namespace remora {
namespace {

Result<Connected> TcpTransportConnect(const Endpoint& ep, const ConnectOptions& options) {
  Connected out;
  ASSIGN_OR_RETURN(Fd sock, TcpConnect(ep.host, ep.port, options.timeout_ms));
  FrameSocket fs(sock.get());
  ASSIGN_OR_RETURN(out.session, RunClientHandshake(fs, options.token, {}, options.timeout_ms));
  std::string peer = SocketPeerName(sock.get());
  out.connection = MakeTcpRequester(std::move(sock), peer);
  return out;
}

Result<std::unique_ptr<Listener>> TcpTransportListen(const Endpoint& ep) { return TcpListen(ep, TransportKind::kTcp); }

Result<std::unique_ptr<Connection>> TcpAdopt(Fd socket, std::vector<Fd> fds) {
  if (!fds.empty()) return Error(Err::kInvalidValue, "a tcp:// client sent {} descriptors with its Hello", fds.size());
  return MakeTcpExecutor(std::move(socket));
}

std::string Available() { return ""; }

}  // namespace

// Over tcp bulk is streamed through the worker's pinned chunks.
const TransportOps kTcpTransport = {"tcp", TransportKind::kTcp, "socket", TcpTransportConnect, TcpTransportListen, TcpAdopt,
                                    Available};

}  // namespace remora
