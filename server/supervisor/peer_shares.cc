#include "supervisor/peer_shares.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstring>

#include "remora/base/log.h"

namespace remora::server {

std::string PeerShareKey(const struct sockaddr* addr, socklen_t len) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (addr->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
    inet_ntop(AF_INET, &reinterpret_cast<const struct sockaddr_in*>(addr)->sin_addr, host, sizeof(host));
    return host;
  }
  if (addr->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
    struct in6_addr a = reinterpret_cast<const struct sockaddr_in6*>(addr)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&a)) {
      inet_ntop(AF_INET, a.s6_addr + 12, host, sizeof(host));
      return host;
    }
    std::memset(a.s6_addr + 8, 0, 8);  // the /64
    inet_ntop(AF_INET6, &a, host, sizeof(host));
    return std::string(host) + "/64";
  }
  return "?";
}

std::string PeerShareKeyOf(int fd) {
  struct sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  if (::getpeername(fd, reinterpret_cast<struct sockaddr*>(&ss), &len) != 0) return "?";
  return PeerShareKey(reinterpret_cast<struct sockaddr*>(&ss), len);
}

size_t PeerShares::Unsettled(const std::string& peer) const {
  size_t n = 0;
  for (const auto& [id, e] : entries_) n += !e.settled && !e.evicting && e.peer == peer;
  return n;
}

PeerShares::Decision PeerShares::Admit(const std::string& peer) {
  Decision d;
  size_t mine = Unsettled(peer);
  if (mine >= per_peer_) {
    d.refusal = fmt::format("{} connections from {} {} (at most {} per address)", mine, peer, unsettled_, per_peer_);
    return d;
  }
  size_t live = 0;
  std::map<std::string, size_t> unsettled;
  for (const auto& [id, e] : entries_) {
    if (e.evicting) continue;
    live++;
    if (!e.settled) unsettled[e.peer]++;
  }
  if (live < total_) {
    d.admit = true;
    return d;
  }
  const std::string* top = nullptr;
  size_t most = 0;
  for (const auto& [p, n] : unsettled)
    if (n > most) {
      most = n;
      top = &p;
    }
  if (top == nullptr || most <= mine) {
    d.refusal = fmt::format("all {} connections are in use", total_);
    return d;
  }
  for (auto& [id, e] : entries_)
    if (!e.settled && !e.evicting && e.peer == *top) {
      e.evicting = true;
      d.evict = id;
      break;
    }
  d.admit = true;
  return d;
}

void PeerShares::Add(uint64_t id, const std::string& peer) { entries_[id] = Entry{peer, false, false}; }

void PeerShares::Settle(uint64_t id) {
  auto it = entries_.find(id);
  if (it != entries_.end()) it->second.settled = true;
}

void PeerShares::Remove(uint64_t id) { entries_.erase(id); }

}  // namespace remora::server
