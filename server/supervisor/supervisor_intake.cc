// The supervisor's intake (loop thread like the rest): accepting connections on every
// listener, shedding them past the limits, and once a peer is authenticated, starting its
// session's worker or joining a data connection to its session.
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include <fmt/ranges.h>

#include "common/worker_args.h"
#include "control.capnp.h"
#include "remora/base/log.h"
#include "remora/base/util.h"
#include "remora/protocol/frame_socket.h"
#include "remora/protocol/message.h"
#include "supervisor/process.h"
#include "supervisor/supervisor.h"
#include "worker/session/limits.h"

namespace remora::server {

namespace {
constexpr int kAcceptsPerEvent = 64;
}  // namespace

void Supervisor::OnAccept(Listener& l) {
  for (int i = 0; i < kAcceptsPerEvent; i++) {
    auto pc = l.Accept();
    if (!pc.ok()) {
      if (pc.status().code() == Err::kNotReady) return;
      if (pc.status().code() == Err::kMemoryAllocation) {
        ShedConnection(l);
        continue;
      }
      uint64_t dropped = 0;
      if (accept_log_.Allow(&dropped))
        LOG_WARN("accept on {}: {}{}", l.endpoint().ToUrl(), pc.status().message(),
                 dropped ? fmt::format(" ({} similar lines left out)", dropped) : "");
      return;
    }
    if (draining_) continue;
    handshakes_->Admit(std::move(*pc));
  }
}

void Supervisor::ShedConnection(Listener& l) {
  // Out of descriptors: the waiting connection would keep the listener readable (and this
  // loop spinning). Free the spare descriptor, take the connection and close it, and keep
  // the spare for next time.
  counters_.handshakes_refused++;
  uint64_t dropped = 0;
  if (accept_log_.Allow(&dropped))
    LOG_WARN("out of file descriptors: dropping a connection to {} (handshakes in progress: {}){}", l.endpoint().ToUrl(),
             handshakes_->size(), dropped ? fmt::format(" ({} similar lines left out)", dropped) : "");
  spare_fd_.reset();
  int c = ::accept4(l.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (c >= 0) ::close(c);
  spare_fd_.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
}

void Supervisor::OnHandshaken(PendingConnection conn, AuthenticatedPeer peer) {
  FrameSocket fs(conn.socket.get());
  if (draining_) {
    (void)SendRefusal(fs, Err::kDevicesUnavailable, "the Remora server is shutting down");
    return;
  }
  if (peer.locate) {
    OnLocate(conn, peer);
    return;
  }
  uint32_t of_tenant = 0;
  for (const auto& [pid, x] : sessions_) of_tenant += x.tenant == peer.tenant;
  if (of_tenant >= options_.max_sessions_per_tenant) {
    LOG_WARN("refusing a session of tenant '{}': it has {} sessions, the limit (--max-sessions-per-tenant)",
             peer.tenant, of_tenant);
    (void)SendRefusal(fs, Err::kDevicesUnavailable,
                      fmt::format("tenant '{}' has reached its limit of {} sessions on this server", peer.tenant,
                                  options_.max_sessions_per_tenant));
    return;
  }
  SessionState s;
  Status st = SpawnSession(conn, peer, &s);
  if (!st.ok()) {
    LOG_ERROR("cannot start a session for tenant '{}': {}", peer.tenant, st.ToString());
    (void)SendRefusal(fs, Err::kDevicesUnavailable, "the server could not start a session: " + st.message());
    return;
  }
  SessionInfo info;
  info.session_id = s.id;
  info.tenant = s.tenant;
  info.backend = inventory_.backend;
  info.emulated = inventory_.emulated;
  info.driver_version = inventory_.driver_version;
  info.kernel_driver = inventory_.kernel_driver;
  info.data_streams = s.data_streams;
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  info.server_name = host;
  st = SendWelcome(fs, peer, info);
  if (!st.ok()) LOG_WARN("session {}: client left during the handshake ({})", s.id, st.message());
  const TenantState& t = tenants_.at(s.tenant);
  LOG_INFO("session {} started: tenant '{}', {}@{} pid {} ({}), {} {}, GPUs [{}], worker pid {}", s.id, s.tenant,
           s.client.user, s.client.hostname, s.client.pid, s.client.program, TransportName(s.transport), s.peer,
           fmt::join(t.gpus, ","), s.pid);
  counters_.sessions_started++;
  auto [at, added] = sessions_.emplace(s.pid, std::move(s));
  if (added) WatchControl(at->second);
}

Status Supervisor::SpawnSession(PendingConnection& conn, const AuthenticatedPeer& peer, SessionState* s) {
  ASSIGN_OR_RETURN(TenantState * t, FindTenant(peer.tenant));
  ASSIGN_OR_RETURN(Fd cache, modules_->TenantDir(t->record.name, launcher_->user().uid, launcher_->user().gid,
                                                 !launcher_->user().helper.empty()));
  ASSIGN_OR_RETURN(s->id, store_->NextSessionId());
  ASSIGN_OR_RETURN(s->ledger_slot, ledger_->OpenSession(t->ledger_index, s->id));
  int ctl[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ctl) != 0) {
    ledger_->CloseSession(s->ledger_slot);
    return ErrnoStatus(Err::kUnknown, "socketpair", errno);
  }
  Fd parent(ctl[0]), child(ctl[1]);
  auto stats = SessionStatsBlock::Create();
  if (!stats.ok()) {
    ledger_->CloseSession(s->ledger_slot);
    return stats.status();
  }
  // The compute board follows the transport's descriptors.
  const int compute_fd = worker_args::kFirstExtraFd + static_cast<int>(conn.fds.size());
  std::vector<std::string> args = {
      "--session", std::to_string(s->id), "--tenant", t->record.name, "--transport", TransportName(conn.kind),
      "--backend", options_.backend, "--gpus", fmt::format("{}", fmt::join(t->gpus, ",")),
      "--ledger-slot", std::to_string(s->ledger_slot), "--extra-fds", std::to_string(conn.fds.size()),
      "--log-level", options_.log_level, "--limits", limits_arg_,
      "--module-cache-budget", std::to_string(options_.module_cache_tenant_bytes),
      "--compute-fd", std::to_string(compute_fd),
      "--client-deadline-ms", std::to_string(static_cast<uint64_t>(options_.deadline_s * 1000))};
  if (options_.backend == "host")
    args.insert(args.end(), {"--host-gpus", std::to_string(options_.host_gpus), "--host-gpu-memory", options_.host_gpu_memory});
  if (worker_memory_max_ > 0) args.insert(args.end(), {"--memory-max", std::to_string(worker_memory_max_)});
  if (peer.keys) args.push_back("--encrypted");
  if (peer.window != 0) args.insert(args.end(), {"--window", std::to_string(peer.window)});
  // tcp: data connections to stripe bulk over (none for encrypted sessions: their bulk stays
  // sealed on the control connection).
  if (conn.kind == TransportKind::kTcp && !peer.keys) {
    uint32_t cap = options_.tcp_streams < 0 ? DefaultDataStreams() : static_cast<uint32_t>(options_.tcp_streams);
    s->data_streams = std::min({peer.data_streams_wanted, cap, kMaxDataStreams});
    s->data_key = peer.data_key;
    if (s->data_streams > 0) args.insert(args.end(), {"--data-streams", std::to_string(s->data_streams)});
  }
  std::vector<std::pair<int, int>> fds = {{conn.socket.get(), worker_args::kClientFd},
                                          {child.get(), worker_args::kControlFd},
                                          {ledger_fd_.get(), worker_args::kLedgerFd},
                                          {stats->fd(), worker_args::kStatsFd},
                                          {ledger_ro_fd_.get(), worker_args::kLedgerReadFd},
                                          {cache.get(), worker_args::kModuleCacheFd}};
  for (size_t i = 0; i < conn.fds.size(); i++)
    fds.emplace_back(conn.fds[i].get(), worker_args::kFirstExtraFd + static_cast<int>(i));
  fds.emplace_back(compute_.fd(), compute_fd);
  compute_.board().OpenSession(s->ledger_slot, t->ledger_index);
  auto pid = launcher_->Launch(args, fds);
  if (!pid.ok()) {
    compute_.board().CloseSession(s->ledger_slot, MonotonicNanos());
    ledger_->CloseSession(s->ledger_slot);
    return pid.status();
  }
  s->pid = *pid;
  if (Status st = registry_->Add(*pid); !st.ok()) LOG_WARN("worker registry: {}", st.ToString());
  s->tenant = t->record.name;
  s->control = std::move(parent);
  s->transport = conn.kind;
  s->peer = conn.peer;
  s->client = peer.client;
  s->started_at = static_cast<int64_t>(std::time(nullptr));
  s->stats = std::move(*stats);
  conn.fds.clear();  // the worker has its copies now
  if (peer.keys) {
    // The data path's keys go to the worker on its control socket, before anything else.
    const SessionKeys& k = *peer.keys;
    Status st = SendControl(*s, [&](void* m) {
      auto b = static_cast<control::ControlMessage::Builder*>(m)->initSessionKeys();
      b.setCipher(static_cast<uint8_t>(k.cipher));
      b.setClientToServer(capnp::Data::Reader(k.client_to_server.data(), k.client_to_server.size()));
      b.setServerToClient(capnp::Data::Reader(k.server_to_client.data(), k.server_to_client.size()));
    });
    if (!st.ok()) {
      SignalWorker(s->pid, SIGKILL);
      return st;
    }
  }
  return Status::Ok();
}

void Supervisor::OnDataConnection(PendingConnection conn, DataHello hello) {
  FrameSocket fs(conn.socket.get());
  SessionState* found = nullptr;
  for (auto& [pid, s] : sessions_)
    if (s.id == hello.session_id && s.transport == TransportKind::kTcp) found = &s;
  // Checked against a blank key when there is no such session (refused whatever it says):
  // the same work either way.
  SessionKey key{};
  if (found != nullptr) key = found->data_key;
  bool mac_ok = CheckDataHello(hello, key);
  std::string why;
  if (found == nullptr) why = "no such session";
  else if (!mac_ok) why = "its proof does not match the session's key";
  else if (hello.index >= found->data_streams)
    why = fmt::format("index {} beyond the {} granted", hello.index, found->data_streams);
  else if (found->data_joined & (1u << hello.index)) why = fmt::format("index {} already joined", hello.index);
  if (!why.empty()) {
    counters_.handshakes_refused++;
    LOG_PEER(data_log_, Warn, "tcp data connection from {} for session {} refused: {}", conn.peer, hello.session_id,
             why);
    (void)SendRefusal(fs, Err::kNoDevice, "data connection refused: not a connection of a session of this server");
    return;
  }
  Status st = SendDataAccepted(fs);
  if (st.ok())
    st = SendControl(*found, [&](void* m) {
      static_cast<control::ControlMessage::Builder*>(m)->setDataConnection(static_cast<uint8_t>(hello.index));
    }, conn.socket.get());
  if (!st.ok()) {
    LOG_WARN("session {}: cannot hand data connection {} to its worker: {}", found->id, hello.index, st.message());
    SignalWorker(found->pid, SIGTERM);  // its worker waits for it: the session cannot work
    return;
  }
  found->data_joined |= 1u << hello.index;
  LOG_DEBUG("session {}: data connection {} of {} joined from {}", found->id, hello.index + 1, found->data_streams,
            conn.peer);
}

}  // namespace remora::server
