// Entry points of the transports that transport.cc dispatches to. Private to protocol/.
#pragma once

#include "remora/protocol/transport.h"

namespace remora {

// The handshake options of a connection with `options` on a transport that can (or cannot)
// encrypt its data path.
ClientHandshakeOptions HandshakeOptions(const ConnectOptions& options, bool can_encrypt);

// rdma/ (librdmacm + libibverbs). The rdma:// port is a TCP bootstrap listener of the
// supervisor; the worker then sets up the queue pair itself (see rdma/README).
Result<Connected> RdmaConnect(const Endpoint& ep, const ConnectOptions& options);
Result<std::unique_ptr<Listener>> RdmaListen(const Endpoint& ep);
Result<std::unique_ptr<Connection>> RdmaAdopt(Fd socket, std::vector<Fd> fds);
// One line for the server log: why rdma:// cannot be served here, or empty if it can.
std::string RdmaUnavailableReason();

}  // namespace remora
