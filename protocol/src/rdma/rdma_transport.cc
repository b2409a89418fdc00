// Entry points of the RDMA transport (transport_internal.h) and connection establishment.
//
//   client                        supervisor                     worker
//   TCP connect  ---------------> rdma:// listener (TCP)
//   Hello/Challenge/Proof/Welcome  (handshake.h, as for tcp://)
//                                 hands the socket over -------> RdmaAdopt
//                                                                rdma_cm listener on the
//                                                                socket's local address
//   <----------------------------------------------------------- bootstrap (wire.h)
//   rdma_cm connect (private data: secret, receive queue) -----> checks the secret, accept
//   <----------------------------------------------------------- (private data: receive queue)
//   ESTABLISHED: frames flow over the QP; the TCP socket stays open, idle, as the liveness
//   channel (EOF = the peer is gone).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "rdma/connections.h"
#include "remora/base/log.h"
#include "remora/base/util.h"
#include "remora/protocol/frame_socket.h"
#include "tcp/tcp_connection.h"
#include "transport_internal.h"

namespace remora {

namespace rdma {
namespace {

constexpr int kSetupTimeoutMs = 15000;  // worker: the client's rdma_cm connect must come by then, at least
constexpr int kResolveTimeoutMs = 5000;
constexpr int kMaxBadConnects = 8;      // connect requests with a wrong secret before giving up

std::string AddressText(const sockaddr_storage& ss) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (ss.ss_family == AF_INET) {
    auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    return fmt::format("{}:{}", host, ntohs(a->sin_port));
  }
  if (ss.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    return fmt::format("[{}]:{}", host, ntohs(a->sin6_port));
  }
  return "?";
}

void SetPort(sockaddr_storage* ss, uint16_t port_be) {
  if (ss->ss_family == AF_INET) reinterpret_cast<sockaddr_in*>(ss)->sin_port = port_be;
  else if (ss->ss_family == AF_INET6) reinterpret_cast<sockaddr_in6*>(ss)->sin6_port = port_be;
}

Status WriteAll(int fd, ConstBytes bytes) {
  struct iovec iov = {const_cast<std::byte*>(bytes.data()), bytes.size()};
  return WriteAllV(fd, &iov, 1);
}

// Reads exactly dst.size() bytes from a blocking or non-blocking socket by the deadline.
Status ReadFull(int fd, MutableBytes dst, uint64_t deadline_ns, const char* what) {
  size_t got = 0;
  while (got < dst.size()) {
    uint64_t now = MonotonicNanos();
    if (now >= deadline_ns) return Error(Err::kDevicesUnavailable, "timed out waiting for {}", what);
    struct pollfd p = {fd, POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>((deadline_ns - now) / 1000000 + 1));
    if (r < 0 && errno != EINTR) return ErrnoStatus(Err::kDevicesUnavailable, "poll", errno);
    if (r <= 0) continue;
    ssize_t n = ::recv(fd, dst.data() + got, dst.size() - got, MSG_DONTWAIT);
    if (n == 0) return Error(Err::kDevicesUnavailable, "the server closed the connection before {}", what);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return ErrnoStatus(Err::kDevicesUnavailable, fmt::format("reading {}", what), errno);
    }
    got += static_cast<size_t>(n);
  }
  return Status::Ok();
}

// Tells the client why the worker cannot serve it over RDMA; returns `st` for the worker.
Status RefuseOverBootstrap(int fd, Status st) {
  Bootstrap b;
  b.status = st.code() == Err::kSuccess ? Err::kUnknown : st.code();
  b.message = st.message();
  (void)WriteAll(fd, EncodeBootstrap(b));
  return st;
}

// Worker: the rdma_cm listener, the bootstrap, and the accepted connection; the client's
// connection must come within setup_ms.
Result<std::unique_ptr<Channel>> AcceptClient(Fd& sock, int setup_ms) {
  const VerbsApi& v = Verbs();
  sockaddr_storage local{};
  socklen_t len = sizeof(local);
  if (getsockname(sock.get(), reinterpret_cast<sockaddr*>(&local), &len) != 0)
    return ErrnoStatus(Err::kUnknown, "getsockname", errno);
  SetPort(&local, 0);

  EventChannel listen_ec(v.create_event_channel());
  if (!listen_ec) return ErrnoStatus(Err::kNotSupported, "rdma_create_event_channel", errno);
  RETURN_IF_ERROR(SetNonBlocking(listen_ec->fd));
  rdma_cm_id* raw = nullptr;
  if (v.create_id(listen_ec.get(), &raw, nullptr, RDMA_PS_TCP) != 0) return ErrnoStatus(Err::kNotSupported, "rdma_create_id", errno);
  CmId listen_id(raw);
  if (v.bind_addr(listen_id.get(), reinterpret_cast<sockaddr*>(&local)) != 0)
    return ErrnoStatus(Err::kNotSupported,
                       fmt::format("rdma_bind_addr({}): no RDMA device serves this address", AddressText(local)), errno);
  if (v.listen(listen_id.get(), 4) != 0) return ErrnoStatus(Err::kNotSupported, "rdma_listen", errno);
  SetPort(&local, v.get_src_port(listen_id.get()));

  Bootstrap boot;
  boot.address = local;
  if (getrandom(boot.secret.data(), boot.secret.size(), 0) != static_cast<ssize_t>(boot.secret.size()))
    return ErrnoStatus(Err::kUnknown, "getrandom", errno);
  RETURN_IF_ERROR(WriteAll(sock.get(), EncodeBootstrap(boot)));
  LOG_DEBUG("rdma: waiting for the client's connection on {}", AddressText(local));

  uint64_t deadline = MonotonicNanos() + uint64_t(std::max(setup_ms, kSetupTimeoutMs)) * 1000000;
  // A copy of the socket outlives its move into the channel: when setting the connection up
  // fails because the client gave up meanwhile (its deadline passed, it died), the rdma_cm
  // calls fail with odd errors (rdma_create_qp: EINVAL), and the log should say why instead.
  Fd watch(::fcntl(sock.get(), F_DUPFD_CLOEXEC, 0));
  auto gave_up = [&](Status st) {
    if (watch && StreamClosed(watch.get()))
      return Error(Err::kDevicesUnavailable, "the client closed its session while its RDMA connection was being set up ({})",
                   st.message());
    return st;
  };
  for (int bad = 0;;) {
    ASSIGN_OR_RETURN(CmEvent ev, NextCmEvent(listen_ec.get(), sock.get(), deadline, "the client's RDMA connection"));
    if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
      LOG_DEBUG("rdma: ignoring {} on the listener", ev.name());
      continue;
    }
    CmId conn(ev->id);
    const rdma_conn_param& req = ev->param.conn;
    Result<ConnectData> peer = DecodeConnectData(req.private_data, req.private_data_len);
    if (!peer.ok() || peer->secret != boot.secret) {
      v.reject(conn.get(), nullptr, 0);
      ev = CmEvent();  // ack before destroying the id it names
      conn.reset();
      LOG_WARN("rdma: refused an RDMA connection that did not come from this session's client");
      if (++bad >= kMaxBadConnects) return Error(Err::kNotPermitted, "too many foreign RDMA connection attempts");
      continue;
    }
    uint8_t remote_initiator = req.initiator_depth, remote_responder = req.responder_resources;
    ev = CmEvent();
    // The connection gets its own event channel; the listener's dies with this function.
    EventChannel ec(v.create_event_channel());
    if (!ec) return ErrnoStatus(Err::kUnknown, "rdma_create_event_channel", errno);
    if (v.migrate_id(conn.get(), ec.get()) != 0) return gave_up(ErrnoStatus(Err::kUnknown, "rdma_migrate_id", errno));
    Result<std::unique_ptr<Channel>> made = Channel::Create(std::move(ec), std::move(conn), std::move(sock), ExecutorGeometry());
    if (!made.ok()) return gave_up(made.take_status());
    std::unique_ptr<Channel> ch = std::move(made).value();
    ch->SetPeer(*peer);
    auto mine = EncodeConnectData(ch->LocalConnectData(Secret{}));
    rdma_conn_param p{};
    p.private_data = mine.data();
    p.private_data_len = static_cast<uint8_t>(mine.size());
    p.responder_resources = std::min(ch->responder_resources(), remote_initiator);
    p.initiator_depth = std::min(ch->initiator_depth(), remote_responder);
    p.rnr_retry_count = 7;
    if (v.accept(ch->id(), &p) != 0) return gave_up(ErrnoStatus(Err::kDevicesUnavailable, "rdma_accept", errno));
    ASSIGN_OR_RETURN(CmEvent est, NextCmEvent(ch->event_channel(), ch->tcp_fd(), deadline, "the RDMA connection to be established"));
    if (est->event != RDMA_CM_EVENT_ESTABLISHED)
      return gave_up(Error(Err::kDevicesUnavailable, "RDMA connection failed: {} (status {})", est.name(), est->status));
    return ch;
  }
}

// Client: from the bootstrap to an established channel.
Result<std::unique_ptr<Channel>> ConnectToWorker(Fd sock, const Bootstrap& boot, uint64_t deadline) {
  const VerbsApi& v = Verbs();
  EventChannel ec(v.create_event_channel());
  if (!ec) return ErrnoStatus(Err::kNotSupported, "rdma_create_event_channel", errno);
  RETURN_IF_ERROR(SetNonBlocking(ec->fd));
  rdma_cm_id* raw = nullptr;
  if (v.create_id(ec.get(), &raw, nullptr, RDMA_PS_TCP) != 0) return ErrnoStatus(Err::kNotSupported, "rdma_create_id", errno);
  CmId id(raw);
  std::string where = AddressText(boot.address);
  sockaddr_storage dst = boot.address;
  if (v.resolve_addr(id.get(), nullptr, reinterpret_cast<sockaddr*>(&dst), kResolveTimeoutMs) != 0)
    return ErrnoStatus(Err::kDevicesUnavailable, fmt::format("rdma_resolve_addr({})", where), errno);
  ASSIGN_OR_RETURN(CmEvent ev, NextCmEvent(ec.get(), sock.get(), deadline, "RDMA address resolution"));
  if (ev->event != RDMA_CM_EVENT_ADDR_RESOLVED)
    return Error(Err::kDevicesUnavailable, "cannot reach {} over RDMA: {} (no RDMA device serves the route to it?)", where, ev.name());
  ev = CmEvent();
  if (v.resolve_route(id.get(), kResolveTimeoutMs) != 0) return ErrnoStatus(Err::kDevicesUnavailable, "rdma_resolve_route", errno);
  ASSIGN_OR_RETURN(ev, NextCmEvent(ec.get(), sock.get(), deadline, "RDMA route resolution"));
  if (ev->event != RDMA_CM_EVENT_ROUTE_RESOLVED)
    return Error(Err::kDevicesUnavailable, "cannot reach {} over RDMA: {}", where, ev.name());
  ev = CmEvent();

  ASSIGN_OR_RETURN(std::unique_ptr<Channel> ch, Channel::Create(std::move(ec), std::move(id), std::move(sock), RequesterGeometry()));
  auto mine = EncodeConnectData(ch->LocalConnectData(boot.secret));
  rdma_conn_param p{};
  p.private_data = mine.data();
  p.private_data_len = static_cast<uint8_t>(mine.size());
  p.responder_resources = ch->responder_resources();  // the worker reads our memory
  p.initiator_depth = ch->initiator_depth();
  p.retry_count = 7;
  p.rnr_retry_count = 7;
  if (v.connect(ch->id(), &p) != 0) return ErrnoStatus(Err::kDevicesUnavailable, "rdma_connect", errno);
  ASSIGN_OR_RETURN(ev, NextCmEvent(ch->event_channel(), ch->tcp_fd(), deadline, "the RDMA connection"));
  if (ev->event == RDMA_CM_EVENT_REJECTED) return Error(Err::kDevicesUnavailable, "the server rejected the RDMA connection to {}", where);
  if (ev->event != RDMA_CM_EVENT_ESTABLISHED)
    return Error(Err::kDevicesUnavailable, "RDMA connection to {} failed: {} (status {})", where, ev.name(), ev->status);
  ASSIGN_OR_RETURN(ConnectData peer, DecodeConnectData(ev->param.conn.private_data, ev->param.conn.private_data_len));
  ch->SetPeer(peer);
  return ch;
}

}  // namespace

uint64_t SpinNanos() {
  static const uint64_t ns = [] {
    const char* env = std::getenv("REMORA_RDMA_SPIN_US");
    char* end = nullptr;
    unsigned long us = env != nullptr ? std::strtoul(env, &end, 10) : 60;
    if (env != nullptr && (end == env || *end != '\0')) us = 60;
    return uint64_t{std::min(us, 1'000'000ul)} * 1000;
  }();
  return ns;
}

Geometry RequesterGeometry() {
  Geometry g;
  g.detach_queued = true;  // notices the application does not wait for must not starve credits
  return g;
}

Geometry ExecutorGeometry() {
  Geometry g;
  // Requests carry at most an encoded body (8 MiB) and small embedded bulk.
  g.max_record_bytes = sizeof(FrameHeader) + 2 * sizeof(BulkDesc) + uint64_t{kMaxBodyWords} * 8 + (1 << 20);
  return g;
}

const Capabilities& RdmaCapabilities() {
  static const Capabilities caps = {"rdma", false, false, true, true, kInlineBulkLimit};
  return caps;
}

}  // namespace rdma

namespace {

Result<std::unique_ptr<Listener>> RdmaListen(const Endpoint& ep, const ListenOptions&) {
  std::string problem = rdma::RdmaDeviceProblem();
  if (!problem.empty()) return Error(Err::kNotSupported, "{}", problem);  // the caller names the URL
  return TcpListen(ep, TransportKind::kRdma);
}


Result<std::unique_ptr<Connection>> RdmaAdopt(Fd socket, std::vector<Fd> fds, const std::optional<SessionKeys>& keys,
                                              int client_setup_ms) {
  if (keys) return Error(Err::kInvalidValue, "rdma:// sessions are not encrypted");
  if (!fds.empty()) return Error(Err::kInvalidValue, "an rdma:// client sent {} descriptors with its Hello", fds.size());
  // The libraries and a device were there when the supervisor listened; check again here.
  std::string problem = rdma::RdmaDeviceProblem();
  if (!problem.empty())
    return rdma::RefuseOverBootstrap(socket.get(), Error(Err::kNotSupported, "the server cannot use RDMA: {}", problem));
  std::string peer = SocketPeerName(socket.get());
  int fd = socket.get();
  Result<std::unique_ptr<rdma::Channel>> ch = rdma::AcceptClient(socket, client_setup_ms);
  if (!ch.ok()) {
    // Until the socket moved into the channel, the client still hears why.
    Status st(ch.status().code(), "the server could not set up RDMA: " + ch.status().message());
    if (socket) return rdma::RefuseOverBootstrap(fd, st);
    return st;
  }
  return rdma::MakeRdmaExecutor(std::move(ch).value(), peer);
}

Result<Connected> RdmaConnect(const Endpoint& ep, const ConnectOptions& options) {
  std::string why;
  if (rdma::LoadVerbs(&why) == nullptr) return Error(Err::kNotSupported, "{}: RDMA cannot be used on this machine: {}", ep.ToUrl(), why);
  uint64_t deadline = MonotonicNanos() + uint64_t(std::max(options.timeout_ms, 1)) * 1000000;
  Connected out;
  ASSIGN_OR_RETURN(Fd sock, TcpConnect(ep.host, ep.port, options.timeout_ms));
  FrameSocket fs(sock.get());
  ASSIGN_OR_RETURN(out.session, RunClientHandshake(fs, HandshakeOptions(options, false), {}, options.timeout_ms));
  std::string peer = SocketPeerName(sock.get());
  // The server is there: its worker (starting now) may take longer to answer on a loaded
  // machine. Waiting costs nothing when it died: its socket closes and the wait ends.
  deadline = std::max(deadline, MonotonicNanos() + uint64_t(std::max(options.server_setup_ms, 0)) * 1000000);

  rdma::Bootstrap boot;
  std::array<std::byte, rdma::kBootstrapFixedBytes> fixed;
  RETURN_IF_ERROR(rdma::ReadFull(sock.get(), fixed, deadline, "the server's RDMA bootstrap"));
  ASSIGN_OR_RETURN(size_t msg, rdma::DecodeBootstrapFixed(fixed, &boot));
  std::string text(msg, '\0');
  RETURN_IF_ERROR(rdma::ReadFull(sock.get(), AsWritableBytes(text.data(), msg), deadline, "the server's RDMA bootstrap"));
  if (boot.status != Err::kSuccess) return Status(boot.status, fmt::format("{}: {}", ep.ToUrl(), text));

  Result<std::unique_ptr<rdma::Channel>> ch = rdma::ConnectToWorker(std::move(sock), boot, deadline);
  if (!ch.ok()) return Status(ch.status().code(), fmt::format("{}: {}", ep.ToUrl(), ch.status().message()));
  out.connection = rdma::MakeRdmaRequester(std::move(ch).value(), peer);
  return out;
}

std::string RdmaUnavailable() { return rdma::RdmaDeviceProblem(); }

}  // namespace

// Over rdma bulk is RDMA-read/written into the worker's pinned staging (GPUDirect RDMA to
// device memory is not implemented).
const TransportOps kRdmaTransport = {"rdma", TransportKind::kRdma, "rdma-host-staged", RdmaConnect, RdmaListen, RdmaAdopt,
                                     RdmaUnavailable};

}  // namespace remora
