// The tcp transport's entries: the handshake, then the session's data connections (each
// joining with a DataHello, docs/PROTOCOL.md), then frames on the control socket with large
// bulk striped over the data connections (tcp_connection.cc, stripes.h).
#include <algorithm>
#include <charconv>
#include <thread>

#include "remora/protocol/frame_socket.h"
#include "tcp/tcp_connection.h"
#include "transport_internal.h"

namespace remora {

uint32_t DefaultDataStreams() {
  unsigned hw = std::thread::hardware_concurrency();
  return std::clamp<uint32_t>(hw, 1, kDefaultDataStreams);
}

Result<int> ParseTcpStreams(std::string_view text) {
  int n = -1;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || ptr != text.data() + text.size() || n < 0 || n > static_cast<int>(kMaxDataStreams))
    return Error(Err::kInvalidValue, "REMORA_TCP_STREAMS='{}': expected a count of data connections from 0 to {}", text,
                 kMaxDataStreams);
  return n;
}

namespace {

// Opens the `info.data_streams` data connections of a session that was just welcomed.
Result<std::vector<Fd>> OpenDataConnections(const Endpoint& ep, const SessionInfo& info, int timeout_ms) {
  std::vector<Fd> data;
  for (uint32_t i = 0; i < info.data_streams; i++) {
    ASSIGN_OR_RETURN(Fd sock, TcpConnect(ep.host, ep.port, timeout_ms));
    FrameSocket fs(sock.get());
    Status st = RunDataHello(fs, info, i, timeout_ms);
    if (!st.ok()) return Status(st.code(), fmt::format("data connection {} of the session: {}", i, st.message()));
    data.push_back(std::move(sock));
  }
  return data;
}

Result<Connected> TcpTransportConnect(const Endpoint& ep, const ConnectOptions& options) {
  Connected out;
  ASSIGN_OR_RETURN(Fd sock, TcpConnect(ep.host, ep.port, options.timeout_ms));
  FrameSocket fs(sock.get());
  ClientHandshakeOptions ho = HandshakeOptions(options, true);
  ho.data_streams = options.data_streams < 0 ? DefaultDataStreams() : static_cast<uint32_t>(options.data_streams);
  ASSIGN_OR_RETURN(out.session, RunClientHandshake(fs, ho, {}, options.timeout_ms));
  std::string peer = SocketPeerName(sock.get());
  if (out.session.keys) {
    // Encrypted sessions keep their bulk on the sealed control connection (the server grants
    // no data connections to them).
    out.session.data_streams = 0;
    out.connection = MakeSecureTcpRequester(std::move(sock), peer, *out.session.keys);
    return out;
  }
  ASSIGN_OR_RETURN(std::vector<Fd> data, OpenDataConnections(ep, out.session, options.timeout_ms));
  out.connection = MakeTcpRequester(std::move(sock), peer, std::move(data));
  return out;
}

}  // namespace

Result<std::vector<std::pair<std::string, uint32_t>>> LocatePool(const Endpoint& ep, const ConnectOptions& options) {
  if (ep.kind != TransportKind::kTcp) return Error(Err::kInvalidValue, "a pool is reached over tcp://");
  ASSIGN_OR_RETURN(Fd sock, TcpConnect(ep.host, ep.port, options.timeout_ms));
  FrameSocket fs(sock.get());
  ClientHandshakeOptions ho = HandshakeOptions(options, true);
  ho.data_streams = 0;
  ho.locate = true;
  ASSIGN_OR_RETURN(SessionInfo info, RunClientHandshake(fs, ho, {}, options.timeout_ms));
  if (!info.server_authenticated)
    return Error(Err::kNoDevice, "{} answered where the tenant's GPUs are without proving it knows the tenant's token",
                 ep.ToUrl());
  return std::move(info.pool_servers);
}

namespace {

Result<std::unique_ptr<Listener>> TcpTransportListen(const Endpoint& ep, const ListenOptions&) {
  return TcpListen(ep, TransportKind::kTcp);
}

// `fds`: the session's data connections, in index order (the worker received them from the
// supervisor after each one's DataHello was checked).
Result<std::unique_ptr<Connection>> TcpAdopt(Fd socket, std::vector<Fd> fds, const std::optional<SessionKeys>& keys, int) {
  if (keys) {
    if (!fds.empty()) return Error(Err::kInvalidValue, "an encrypted tcp session has no data connections");
    return MakeSecureTcpExecutor(std::move(socket), *keys);
  }
  return MakeTcpExecutor(std::move(socket), std::move(fds));
}

std::string Available() { return ""; }

}  // namespace

// Over tcp bulk is streamed through the worker's pinned chunks.
const TransportOps kTcpTransport = {"tcp", TransportKind::kTcp, "socket", TcpTransportConnect, TcpTransportListen, TcpAdopt,
                                    Available};

}  // namespace remora
