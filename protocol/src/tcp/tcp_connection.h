// TCP transport: frames as a byte stream, bulk as a trailer right after the frame body.
// Private to protocol/.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "remora/base/fd.h"
#include "remora/protocol/connection.h"
#include "remora/protocol/secure.h"
#include "remora/protocol/transport.h"

namespace remora {

// Requester side over an already handshaken socket, bulk of 1 MiB and more striped over
// the session's accepted data connections `data` (tcp/stripes.h), if any.
std::unique_ptr<Connection> MakeTcpRequester(Fd sock, std::string peer, std::vector<Fd> data = {});
// Executor side (switches the socket to non-blocking); `data` as above, in index order.
Result<std::unique_ptr<Connection>> MakeTcpExecutor(Fd sock, std::vector<Fd> data = {});
// The same with the data path sealed in records (secure_tcp_connection.cc).
std::unique_ptr<Connection> MakeSecureTcpRequester(Fd sock, std::string peer, const SessionKeys& keys);
Result<std::unique_ptr<Connection>> MakeSecureTcpExecutor(Fd sock, const SessionKeys& keys);

// Socket helpers shared with the rdma bootstrap.
Result<Fd> TcpConnect(const std::string& host, uint16_t port, int timeout_ms);
Result<std::unique_ptr<Listener>> TcpListen(const Endpoint& endpoint, TransportKind kind);
void TuneTcpSocket(int fd);
std::string SocketPeerName(int fd);

}  // namespace remora
