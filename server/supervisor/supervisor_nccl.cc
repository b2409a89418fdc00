// The supervisor's end of NCCL (docs/ARCHITECTURE.md, "NCCL"): workers register the unique ids
// they made and resolve the capabilities their clients present (ncclAsk on the control socket);
// the registry (nccl_registry.h) decides; another server's capability is resolved by that
// server over the peer link (peer_link.h); a session's end reaches every member of its
// cliques, here and on the other servers.
#include <signal.h>
#include <sodium.h>

#include <cstring>
#include <set>

#include "control.capnp.h"
#include "remora/base/log.h"
#include "remora/base/util.h"
#include "remora/protocol/message.h"
#include "supervisor/supervisor.h"

namespace remora::server {
namespace {

constexpr uint8_t kRegister = 0, kResolve = 1, kLeave = 2;
// One answer for every refusal: the reason stays in this server's log.
constexpr uint32_t kRefused = kNcclInvalidArgument;

NcclIdBytes ToId(capnp::Data::Reader d) {
  NcclIdBytes out{};
  if (d.size() == out.size()) std::copy(d.begin(), d.end(), out.begin());
  return out;
}

}  // namespace

Status Supervisor::StartNccl() {
  uint64_t id = 0;
  while (id == 0) randombytes_buf(&id, sizeof(id));
  std::string advertise = options_.peer_advertise;
  if (advertise.empty() && !options_.peer_listen.empty()) {
    ASSIGN_OR_RETURN(Endpoint ep, ParseEndpoint(options_.peer_listen));
    advertise = ep.ToUrl().substr(6);  // HOST:PORT of tcp://HOST:PORT
  }
  if (advertise.size() > 80) return Error(Err::kInvalidValue, "--peer-advertise {}: at most 80 characters", advertise);
  nccl_ = std::make_unique<NcclRegistry>(id, advertise);
  if (options_.peer_listen.empty() && options_.peers.empty()) return Status::Ok();
  if (options_.peer_key_file.empty()) return Error(Err::kInvalidValue, "--peer-listen and --peer need --peer-key-file");
  PeerOptions po;
  po.listen = options_.peer_listen;
  po.allowed = options_.peers;
  po.key_file = options_.peer_key_file;
  po.deadline_s = options_.deadline_s;
  PeerLinks::Handlers h;
  h.message = [this](uint64_t link, uint64_t server, std::vector<uint8_t> m) { OnPeerMessage(link, server, std::move(m)); };
  h.down = [this](uint64_t link, uint64_t server, const std::string& why) { OnPeerDown(link, server, why); };
  ASSIGN_OR_RETURN(peers_, PeerLinks::Start(po, id, [this](std::function<void()> fn) { Post(std::move(fn)); }, std::move(h)));
  LOG_INFO("NCCL: this server is {:x}; its unique ids name peer address '{}'", id, advertise);
  return Status::Ok();
}

void Supervisor::AnswerNccl(pid_t pid, uint64_t request, uint32_t status, const NcclIdBytes* id, NcclClique clique) {
  auto it = sessions_.find(pid);
  if (it == sessions_.end()) return;  // it ended meanwhile
  Status st = SendControl(it->second, [&](void* p) {
    auto a = static_cast<control::ControlMessage::Builder*>(p)->initNcclAnswer();
    a.setRequestId(request);
    a.setStatus(status);
    if (id != nullptr) a.setId(capnp::Data::Reader(id->data(), id->size()));
    a.setCliqueServer(clique.server);
    a.setCliqueId(clique.id);
  });
  if (!st.ok()) LOG_WARN("session {}: cannot answer its worker's NCCL question: {}", it->second.id, st.message());
}

void Supervisor::OnNcclAsk(pid_t pid, uint64_t request, uint8_t op, const NcclIdBytes& id, NcclClique clique) {
  auto it = sessions_.find(pid);
  if (it == sessions_.end()) return;
  SessionState& s = it->second;
  NcclMember me{nccl_->server_id(), s.id, pid, 0};
  if (op == kRegister) {
    NcclClique made;
    auto cap = nccl_->Register(me, s.tenant, id, &made);
    if (!cap.ok()) {
      LOG_WARN("session {} (tenant '{}'): {}", s.id, s.tenant, cap.status().message());
      return AnswerNccl(pid, request, kNcclSystemError, nullptr, {});
    }
    return AnswerNccl(pid, request, kNcclSuccess, &*cap, made);
  }
  if (op == kLeave) {
    // The session destroyed its communicators of the clique: its end is no loss to them.
    if (clique.server == nccl_->server_id()) {
      DeliverNccl(nccl_->MemberEnded(me, &clique, true, ""));
    } else {
      for (const auto& ended : nccl_->LocalEndedRemote(pid, &clique)) {
        const auto& c = ended.second;  // (clang 14, CI's, cannot capture a structured binding)
        SendPeer(ended.first, [&](void* p) {
          auto l = static_cast<control::PeerMessage::Builder*>(p)->initLost();
          l.setCliqueServer(c.server);
          l.setCliqueId(c.id);
          l.setSession(s.id);
          l.setLeft(true);
        });
      }
    }
    return;
  }
  if (op != kResolve) {
    LOG_WARN("session {}: an NCCL question of unknown kind {}", s.id, op);
    return AnswerNccl(pid, request, kRefused, nullptr, {});
  }
  auto cap = NcclRegistry::Parse(id);
  if (!cap) {
    LOG_WARN("session {} (tenant '{}', {}@{} pid {}) presented an NCCL unique id that is not a Remora capability", s.id,
             s.tenant, s.client.user, s.client.hostname, s.client.pid);
    return AnswerNccl(pid, request, kRefused, nullptr, {});
  }
  if (cap->server == nccl_->server_id()) {
    std::string why;
    auto real = nccl_->Resolve(*cap, s.tenant, me, &why);
    if (!real) {
      LOG_WARN("session {} (tenant '{}', {}@{} pid {}) was refused an NCCL unique id: {}", s.id, s.tenant, s.client.user,
               s.client.hostname, s.client.pid, why);
      return AnswerNccl(pid, request, kRefused, nullptr, {});
    }
    return AnswerNccl(pid, request, kNcclSuccess, &*real, NcclClique{cap->server, cap->number});
  }
  // Another server's: asked of it over the peer link.
  if (!peers_ || cap->address.empty()) {
    LOG_WARN("session {} (tenant '{}') presented server {:x}'s NCCL unique id, but {}", s.id, s.tenant, cap->server,
             peers_ ? "that server has no peer listener" : "this server has no peer link (--peer, --peer-key-file)");
    return AnswerNccl(pid, request, kRefused, nullptr, {});
  }
  auto link = peers_->Dial(cap->address);
  if (!link.ok()) {
    LOG_WARN("session {} (tenant '{}'): {}", s.id, s.tenant, link.status().message());
    return AnswerNccl(pid, request, kRefused, nullptr, {});
  }
  uint64_t mine = next_peer_request_++;
  remote_resolves_[mine] = RemoteResolve{pid, s.id, request, *link};
  SendPeer(*link, [&](void* p) {
    auto r = static_cast<control::PeerMessage::Builder*>(p)->initResolve();
    r.setRequestId(mine);
    r.setCapability(capnp::Data::Reader(id.data(), id.size()));
    r.setTenant(s.tenant);
    r.setSession(s.id);
  });
}

void Supervisor::SendPeer(uint64_t link, const std::function<void(void*)>& build) {
  if (!peers_) return;
  ScratchMessage msg;
  auto root = msg.InitRoot<control::PeerMessage>();
  build(&root);
  std::span<const uint64_t> words = msg.Flatten();
  std::vector<uint8_t> bytes(words.size() * sizeof(uint64_t));
  std::memcpy(bytes.data(), words.data(), bytes.size());
  peers_->Send(link, std::move(bytes));
}

void Supervisor::DeliverNccl(const std::vector<NcclNotice>& notices) {
  std::set<std::pair<uint64_t, NcclClique>> told;  // one message per link and clique
  for (const NcclNotice& n : notices) {
    if (n.to.link != 0) {
      if (!told.insert({n.to.link, n.clique}).second) continue;
      SendPeer(n.to.link, [&](void* p) {
        auto l = static_cast<control::PeerMessage::Builder*>(p)->initLost();
        l.setCliqueServer(n.clique.server);
        l.setCliqueId(n.clique.id);
        l.setReason(n.reason);
      });
      continue;
    }
    auto it = sessions_.find(n.to.pid);
    if (it == sessions_.end()) continue;
    Status st = SendControl(it->second, [&](void* p) {
      auto l = static_cast<control::ControlMessage::Builder*>(p)->initNcclLost();
      l.setCliqueServer(n.clique.server);
      l.setCliqueId(n.clique.id);
      l.setReason(n.reason);
    });
    if (!st.ok()) LOG_WARN("session {}: cannot tell its worker a rank is gone: {}", it->second.id, st.message());
  }
}

void Supervisor::NcclSessionEnded(SessionState& s) {
  if (!nccl_) return;
  std::string reason = fmt::format("session {} (tenant '{}') on server {:x} ended", s.id, s.tenant, nccl_->server_id());
  DeliverNccl(nccl_->MemberEnded(NcclMember{nccl_->server_id(), s.id, s.pid, 0}, nullptr, false, reason));
  for (const auto& ended : nccl_->LocalEndedRemote(s.pid, nullptr)) {
    const auto& c = ended.second;
    SendPeer(ended.first, [&](void* p) {
      auto l = static_cast<control::PeerMessage::Builder*>(p)->initLost();
      l.setCliqueServer(c.server);
      l.setCliqueId(c.id);
      l.setSession(s.id);
      l.setReason(reason);
    });
  }
  for (auto it = remote_resolves_.begin(); it != remote_resolves_.end();)
    it = it->second.pid == s.pid ? remote_resolves_.erase(it) : std::next(it);
}

void Supervisor::OnPeerMessage(uint64_t link, uint64_t server, std::vector<uint8_t> message) {
  if (message.size() % sizeof(uint64_t) != 0) {
    LOG_WARN("peer link {} (server {:x}): a message of {} bytes (not whole words)", link, server, message.size());
    return;
  }
  std::vector<uint64_t> words(message.size() / sizeof(uint64_t));
  std::memcpy(words.data(), message.data(), message.size());
  Status st = GuardDecode("peer message", [&]() -> Status {
    BodyReader r(std::span<const uint64_t>(words.data(), words.size()));
    auto m = r.Root<control::PeerMessage>();
    switch (m.which()) {
      case control::PeerMessage::HEARTBEAT:
        return Status::Ok();
      case control::PeerMessage::RESOLVE: {  // we are the origin
        auto x = m.getResolve();
        NcclIdBytes id = ToId(x.getCapability());
        std::string tenant(x.getTenant().cStr(), x.getTenant().size());
        auto cap = NcclRegistry::Parse(id);
        std::string why = "not a Remora capability";
        std::optional<NcclIdBytes> real;
        if (cap) real = nccl_->Resolve(*cap, tenant, NcclMember{server, x.getSession(), -1, link}, &why);
        if (!real)
          LOG_WARN("server {:x} asked for an NCCL unique id for session {} (tenant '{}'): refused: {}", server,
                   x.getSession(), Printable(tenant), why);
        SendPeer(link, [&](void* p) {
          auto a = static_cast<control::PeerMessage::Builder*>(p)->initResolved();
          a.setRequestId(x.getRequestId());
          a.setStatus(real ? kNcclSuccess : kRefused);
          if (real) a.setId(capnp::Data::Reader(real->data(), real->size()));
          if (cap) {
            a.setCliqueServer(cap->server);
            a.setCliqueId(cap->number);
          }
        });
        return Status::Ok();
      }
      case control::PeerMessage::RESOLVED: {  // we are the member's server
        auto x = m.getResolved();
        auto it = remote_resolves_.find(x.getRequestId());
        if (it == remote_resolves_.end() || it->second.link != link) return Status::Ok();  // its session ended
        RemoteResolve rr = it->second;
        remote_resolves_.erase(it);
        NcclClique clique{x.getCliqueServer(), x.getCliqueId()};
        if (x.getStatus() != kNcclSuccess || x.getId().size() != kNcclIdBytes)
          return AnswerNccl(rr.pid, rr.request, kRefused, nullptr, {}), Status::Ok();
        if (sessions_.count(rr.pid) == 0) return Status::Ok();
        nccl_->JoinedRemote(link, clique, rr.pid, rr.session);
        NcclIdBytes real = ToId(x.getId());
        AnswerNccl(rr.pid, rr.request, kNcclSuccess, &real, clique);
        return Status::Ok();
      }
      case control::PeerMessage::LOST: {
        auto x = m.getLost();
        NcclClique clique{x.getCliqueServer(), x.getCliqueId()};
        std::string reason = Printable(std::string_view(x.getReason().cStr(), x.getReason().size()), 512);
        if (clique.server == nccl_->server_id()) {
          // A member on that server ended or left.
          DeliverNccl(nccl_->MemberEnded(NcclMember{server, x.getSession(), -1, link}, &clique, x.getLeft(), reason));
        } else {
          // The origin says the clique lost a member: tell ours.
          for (pid_t pid : nccl_->RemoteLost(clique))
            DeliverNccl({NcclNotice{NcclMember{nccl_->server_id(), 0, pid, 0}, clique, reason}});
        }
        return Status::Ok();
      }
    }
    return Status::Ok();
  });
  if (!st.ok()) LOG_WARN("peer link {} (server {:x}): {}", link, server, st.message());
}

void Supervisor::OnPeerDown(uint64_t link, uint64_t server, const std::string& why) {
  LOG_WARN("peer link {} to server {:x} is down: {}", link, server, why);
  if (!nccl_) return;
  DeliverNccl(nccl_->LinkLost(link, fmt::format("the link to server {:x} is down: {}", server, why)));
  for (auto it = remote_resolves_.begin(); it != remote_resolves_.end();) {
    if (it->second.link != link) {
      ++it;
      continue;
    }
    AnswerNccl(it->second.pid, it->second.request, kRefused, nullptr, {});
    it = remote_resolves_.erase(it);
  }
}

}  // namespace remora::server
