#include "supervisor/handshakes.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "remora/base/log.h"
#include "remora/base/util.h"
#include "remora/protocol/frame.h"

namespace remora::server {

std::string PeerKey(const PendingConnection& pc) {
  int fd = pc.socket.get();
  if (pc.kind == TransportKind::kShm) {
    struct ucred cred = {};
    socklen_t len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) return "uid:" + std::to_string(cred.uid);
    return "uid:?";
  }
  struct sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  char host[INET6_ADDRSTRLEN] = "?";
  if (getpeername(fd, reinterpret_cast<struct sockaddr*>(&ss), &len) == 0) {
    if (ss.ss_family == AF_INET) inet_ntop(AF_INET, &reinterpret_cast<struct sockaddr_in*>(&ss)->sin_addr, host, sizeof(host));
    else if (ss.ss_family == AF_INET6) inet_ntop(AF_INET6, &reinterpret_cast<struct sockaddr_in6*>(&ss)->sin6_addr, host, sizeof(host));
  }
  return std::string("ip:") + host;
}

struct Handshakes::Entry {
  uint64_t id = 0;
  PendingConnection pc;
  std::string peer_key;
  uint64_t hello_deadline_ns = 0, deadline_ns = 0;
  bool hello_done = false;
  bool first_read = true;
  FrameHeader header{};
  size_t have = 0;  // bytes of the current frame received (header, then body)
  std::vector<uint64_t> body;
  std::unique_ptr<ServerHandshake> hs;
};

Handshakes::Handshakes(int epoll_fd, HandshakeLimits limits, Done done)
    : epoll_(epoll_fd), limits_(limits), done_(std::move(done)) {}

Handshakes::~Handshakes() { CloseAll(); }

bool Handshakes::EvictIdle(const std::function<bool(const Entry&)>& pred) {
  for (auto& [id, e] : entries_) {
    if (e->hello_done || !pred(*e)) continue;
    // Bytes waiting to be read are (likely) a client's Hello: keep it, and look further.
    int pending = 0;
    if (::ioctl(e->pc.socket.get(), FIONREAD, &pending) == 0 && pending > 0) continue;
    Fail(id, Error(Err::kTimeout, "evicted: its peer opened newer connections and this one sent no Hello"), nullptr);
    return true;
  }
  return false;
}

void Handshakes::Admit(PendingConnection pc) {
  auto e = std::make_unique<Entry>();
  e->peer_key = PeerKey(pc);
  size_t of_peer = 0, of_transport = 0;
  for (const auto& [id, x] : entries_) {
    of_peer += x->peer_key == e->peer_key;
    of_transport += x->pc.kind == pc.kind;
  }
  const std::string key = e->peer_key;
  const TransportKind kind = pc.kind;
  if (of_peer >= limits_.per_peer && !EvictIdle([&](const Entry& x) { return x.peer_key == key; })) {
    if (refused_ != nullptr) (*refused_)++;
    uint64_t dropped = 0;
    if (log_budget_.Allow(&dropped))
      LOG_WARN("refusing {} connection from {}: {} handshakes of this peer are in progress{}", TransportName(kind),
               pc.peer, of_peer, dropped ? fmt::format(" ({} similar lines left out)", dropped) : "");
    return;  // closes the socket
  }
  if (of_transport >= limits_.per_transport && !EvictIdle([&](const Entry& x) { return x.pc.kind == kind; })) {
    if (refused_ != nullptr) (*refused_)++;
    uint64_t dropped = 0;
    if (log_budget_.Allow(&dropped))
      LOG_WARN("refusing {} connection from {}: {} handshakes are in progress on this transport{}", TransportName(kind),
               pc.peer, of_transport, dropped ? fmt::format(" ({} similar lines left out)", dropped) : "");
    return;
  }
  int fd = pc.socket.get();
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) return;
  ServerConnectionInfo info;
  info.can_encrypt = pc.kind == TransportKind::kTcp;
  info.loopback = pc.kind != TransportKind::kShm && PeerIsLoopback(fd);
  uint64_t now = MonotonicNanos();
  e->id = next_id_++;
  e->deadline_ns = now + uint64_t(limits_.deadline_ms) * 1'000'000;
  e->hello_deadline_ns = now + uint64_t(limits_.deadline_ms) * 500'000;
  e->hs = std::make_unique<ServerHandshake>(policy_, info);
  e->pc = std::move(pc);
  struct epoll_event ev = {};
  ev.events = EPOLLIN | EPOLLRDHUP;
  ev.data.u64 = kTagBase + e->id;
  if (::epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &ev) != 0) return;
  entries_.emplace(e->id, std::move(e));
}

std::optional<PendingConnection> Handshakes::Detach(uint64_t id) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return std::nullopt;
  // Out of the epoll set while this process still holds the socket: an entry lives as long
  // as the open file does, which the worker shares after a hand-over, so one left behind
  // would wake this loop on every byte the session's client sends.
  ::epoll_ctl(epoll_, EPOLL_CTL_DEL, it->second->pc.socket.get(), nullptr);
  PendingConnection pc = std::move(it->second->pc);
  entries_.erase(it);
  return pc;
}

void Handshakes::Remove(uint64_t id) { (void)Detach(id); }

PendingConnection Handshakes::Take(uint64_t id) {
  std::optional<PendingConnection> pc = Detach(id);
  if (!pc) return {};
  int flags = ::fcntl(pc->socket.get(), F_GETFL);
  if (flags >= 0) ::fcntl(pc->socket.get(), F_SETFL, flags & ~O_NONBLOCK);
  return std::move(*pc);
}

void Handshakes::Fail(uint64_t id, const Status& why, const std::vector<uint64_t>* refusal) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  Entry& e = *it->second;
  if (refused_ != nullptr) (*refused_)++;
  if (refusal != nullptr && !refusal->empty()) {
    FrameHeader h;
    h.kind = static_cast<uint16_t>(FrameKind::kHandshake);
    h.body_words = static_cast<uint32_t>(refusal->size());
    struct iovec iov[2] = {{&h, sizeof(h)}, {const_cast<uint64_t*>(refusal->data()), refusal->size() * 8}};
    struct msghdr msg = {};
    msg.msg_iov = iov;
    msg.msg_iovlen = 2;
    (void)::sendmsg(e.pc.socket.get(), &msg, MSG_DONTWAIT | MSG_NOSIGNAL);  // best effort
  }
  uint64_t dropped = 0;
  if (log_budget_.Allow(&dropped))
    LOG_WARN("{} connection from {} refused: {}{}", TransportName(e.pc.kind), e.pc.peer, why.message(),
             dropped ? fmt::format(" ({} similar lines left out)", dropped) : "");
  Remove(id);
}

Status Handshakes::ReadSome(Entry& e, bool* complete) {
  *complete = false;
  int fd = e.pc.socket.get();
  for (;;) {
    size_t want;
    uint8_t* dst;
    if (e.have < sizeof(FrameHeader)) {
      want = sizeof(FrameHeader) - e.have;
      dst = reinterpret_cast<uint8_t*>(&e.header) + e.have;
    } else {
      size_t body_bytes = e.body.size() * 8;
      size_t got = e.have - sizeof(FrameHeader);
      if (got == body_bytes) {
        *complete = true;
        return Status::Ok();
      }
      want = body_bytes - got;
      dst = reinterpret_cast<uint8_t*>(e.body.data()) + got;
    }
    struct iovec iov = {dst, want};
    struct msghdr msg = {};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    // A descriptor is accepted only with the first bytes of a shm connection, and only one:
    // the kernel closes any others (and every descriptor sent later) without handing them
    // to this process.
    alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int))];
    bool take_fd = e.first_read && e.pc.kind == TransportKind::kShm;
    if (take_fd) {
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
    }
    ssize_t r = ::recvmsg(fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) return Status::Ok();
      return ErrnoStatus(Err::kDevicesUnavailable, "read", errno);
    }
    if (take_fd) {
      for (struct cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; i++) {
          int got;
          std::memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
          e.pc.fds.emplace_back(got);
        }
      }
    }
    if (r == 0) return Error(Err::kDevicesUnavailable, "the peer closed the connection");
    e.first_read = false;
    e.have += static_cast<size_t>(r);
    if (e.have == sizeof(FrameHeader)) {
      RETURN_IF_ERROR(ValidateFrameHeader(e.header));
      if (e.header.kind != static_cast<uint16_t>(FrameKind::kHandshake) || e.header.bulk_bytes != 0)
        return Error(Err::kInvalidValue, "expected a handshake frame");
      if (e.header.body_words > kMaxHandshakeBodyWords)
        return Error(Err::kInvalidValue, "a handshake message of {} bytes (at most {})", e.header.body_words * 8ull,
                     kMaxHandshakeBodyWords * 8);
      e.body.assign(e.header.body_words, 0);
    }
  }
}

void Handshakes::OnEvent(uint64_t tag) {
  uint64_t id = tag - kTagBase;
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  Entry& e = *it->second;
  bool complete = false;
  Status st = ReadSome(e, &complete);
  if (!st.ok()) {
    // Not a Remora handshake (another protocol, another framing version): say so.
    std::vector<uint64_t> refusal;
    if (st.code() == Err::kInvalidValue) refusal = RefusalBody(st.code(), st.message());
    Fail(id, st, &refusal);
    return;
  }
  if (!complete) return;
  std::vector<uint64_t> body = std::move(e.body);
  e.body.clear();
  e.have = 0;
  if (!e.hello_done) {
    e.hello_done = true;
    if (e.pc.kind == TransportKind::kShm ? e.pc.fds.size() != 1 : !e.pc.fds.empty()) {
      Status bad = Error(Err::kInvalidValue, "{} descriptors came with the Hello", e.pc.fds.size());
      std::vector<uint64_t> refusal = RefusalBody(bad.code(), bad.message());
      Fail(id, bad, &refusal);
      return;
    }
    if (e.pc.kind == TransportKind::kTcp && data_done_) {
      auto data = ParseDataHello(body);
      if (!data.ok()) {
        std::vector<uint64_t> refusal = RefusalBody(data.status().code(), data.status().message());
        Fail(id, data.status(), &refusal);
        return;
      }
      if (*data) {
        data_done_(Take(id), **data);
        return;
      }
    }
    auto challenge = e.hs->OnHello(body);
    if (!challenge.ok()) {
      Fail(id, challenge.status(), &e.hs->refusal());
      return;
    }
    FrameHeader h;
    h.kind = static_cast<uint16_t>(FrameKind::kHandshake);
    h.body_words = static_cast<uint32_t>(challenge->size());
    struct iovec iov[2] = {{&h, sizeof(h)}, {challenge->data(), challenge->size() * 8}};
    struct msghdr msg = {};
    msg.msg_iov = iov;
    msg.msg_iovlen = 2;
    ssize_t w = ::sendmsg(e.pc.socket.get(), &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (w != static_cast<ssize_t>(sizeof(h) + challenge->size() * 8))
      Fail(id, Error(Err::kDevicesUnavailable, "cannot send the Challenge"), nullptr);
    return;
  }
  auto peer = e.hs->OnProof(body);
  if (!peer.ok()) {
    Fail(id, peer.status(), &e.hs->refusal());
    return;
  }
  done_(Take(id), std::move(*peer));
}

void Handshakes::Expire(uint64_t now_ns) {
  std::vector<uint64_t> late;
  for (const auto& [id, e] : entries_)
    if (now_ns > e->deadline_ns || (!e->hello_done && now_ns > e->hello_deadline_ns)) late.push_back(id);
  for (uint64_t id : late) {
    const Entry& e = *entries_.at(id);
    Fail(id, Error(Err::kTimeout, "no {} within {} ms", e.hello_done ? "Proof" : "complete Hello",
                   e.hello_done ? limits_.deadline_ms : limits_.deadline_ms / 2), nullptr);
  }
}

void Handshakes::CloseAll() {
  while (!entries_.empty()) Remove(entries_.begin()->first);
}

}  // namespace remora::server
