// Per-peer shares of a listener's connection slots (the admin API over TCP and the metrics
// endpoint; docs/SECURITY.md, N8). A peer is an IPv4 address or an IPv6 /64 (one host's
// usual allotment, so that cheap addresses buy no extra share).
//
//  - A peer holds at most `per_peer` unsettled connections (not logged in, or not yet
//    answered); one more is refused with a message saying why.
//  - With all `total` slots taken, a newcomer evicts the oldest unsettled connection of the
//    peer that holds the most unsettled ones, if that peer holds more than the newcomer;
//    otherwise it is refused. So whatever one peer (or a few) holds, a peer that holds less
//    still gets in.
//  - Settled connections (an administrator who logged in) count towards `total` and are
//    never evicted.
// Pure bookkeeping: the caller closes, evicts and refuses. Thread-safety: none.
#pragma once

#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace remora::server {

// The peer of a connected socket ("198.51.100.7", "2001:db8:1:2::/64"; a v4-mapped IPv6
// address is its IPv4 address); "?" if it has none.
std::string PeerShareKey(const struct sockaddr* addr, socklen_t len);
std::string PeerShareKeyOf(int fd);

class PeerShares {
 public:
  // `unsettled` says what an unsettled connection is, for refusals ("have not logged in yet").
  PeerShares(size_t total, size_t per_peer, std::string unsettled = "have not logged in yet")
      : total_(total), per_peer_(per_peer), unsettled_(std::move(unsettled)) {}

  struct Decision {
    bool admit = false;
    std::optional<uint64_t> evict;  // with admit: end this connection to make room
    std::string refusal;            // without admit: why, for the peer and the log
  };
  // Decides about a new connection of `peer`. An evicted connection stops counting at once
  // (the caller ends it and then calls Remove).
  Decision Admit(const std::string& peer);
  // Records an admitted connection.
  void Add(uint64_t id, const std::string& peer);
  // The connection logged in: no longer in its peer's share, never evicted.
  void Settle(uint64_t id);
  void Remove(uint64_t id);

  size_t size() const { return entries_.size(); }
  // Unsettled connections of `peer` that are not being evicted.
  size_t Unsettled(const std::string& peer) const;

 private:
  struct Entry {
    std::string peer;
    bool settled = false;
    bool evicting = false;
  };
  size_t total_, per_peer_;
  std::string unsettled_;
  std::map<uint64_t, Entry> entries_;  // ids are handed out in order: begin() is the oldest
};

}  // namespace remora::server
