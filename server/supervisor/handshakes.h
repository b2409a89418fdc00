// Connections between accept(2) and authentication, driven by the supervisor's event loop
// (no thread per connection; docs/SECURITY.md, "Unauthenticated peers").
//
// Budgets, so that idle, slow or hostile peers starve nobody:
//  - one absolute deadline per handshake (the whole Hello must arrive within half of it);
//  - at most `per_peer` handshakes in progress per peer (IP address, or uid for shm): a new
//    connection evicts the peer's oldest one that has not sent (any of) its Hello and has
//    nothing waiting to be read, else it is refused;
//  - at most `per_transport` per transport, with the same eviction, so TCP peers can never
//    use up the shared-memory clients' budget;
//  - a Hello or Proof body of at most kMaxHandshakeBodyWords, and exactly one descriptor,
//    accepted only with the first bytes of a shm connection (any others are closed by the
//    kernel, which never hands them to this process).
// Thread-safety: none; the supervisor's loop thread owns it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "remora/base/log_budget.h"
#include "remora/protocol/handshake.h"
#include "remora/protocol/transport.h"

namespace remora::server {

struct HandshakeLimits {
  int deadline_ms = 5000;
  size_t per_peer = 512;
  size_t per_transport = 1024;
};

class Handshakes {
 public:
  // Called for each authenticated connection (the socket is blocking again).
  using Done = std::function<void(PendingConnection, AuthenticatedPeer)>;
  // Called for each tcp connection whose first message is a DataHello (not yet checked:
  // the session's owner does that; the socket is blocking again).
  using DataDone = std::function<void(PendingConnection, DataHello)>;
  static constexpr uint64_t kTagBase = 1ull << 32;  // epoll tags of handshakes: kTagBase + id

  Handshakes(int epoll_fd, HandshakeLimits limits, Done done);
  ~Handshakes();

  void SetPolicy(ServerAuthPolicy policy) { policy_ = std::move(policy); }
  void SetDataDone(DataDone data_done) { data_done_ = std::move(data_done); }
  // Counts every connection refused or dropped before it authenticated (the /metrics counter).
  void SetRefusedCounter(std::atomic<uint64_t>* refused) { refused_ = refused; }

  // Takes a freshly accepted connection (made non-blocking here).
  void Admit(PendingConnection pc);
  static bool Owns(uint64_t tag) { return tag >= kTagBase; }
  void OnEvent(uint64_t tag);
  // Ends handshakes past their deadline.
  void Expire(uint64_t now_ns);
  // Ends every handshake in progress (shutdown).
  void CloseAll();
  size_t size() const { return entries_.size(); }

 private:
  struct Entry;
  // Ends a handshake: sends `refusal` (if any, best effort), logs `why` within the log
  // budget, closes the connection.
  void Fail(uint64_t id, const Status& why, const std::vector<uint64_t>* refusal);
  void Remove(uint64_t id);
  // Ends a handshake that succeeded: its connection, out of the epoll set and blocking again.
  PendingConnection Take(uint64_t id);
  // Takes an entry out of the epoll set and the table; nullopt if there is none.
  std::optional<PendingConnection> Detach(uint64_t id);
  Status ReadSome(Entry& e, bool* complete);
  // Evicts the oldest entry that has not sent its Hello among those matching `pred`.
  bool EvictIdle(const std::function<bool(const Entry&)>& pred);

  int epoll_;
  HandshakeLimits limits_;
  Done done_;
  DataDone data_done_;
  ServerAuthPolicy policy_;
  uint64_t next_id_ = 1;
  std::map<uint64_t, std::unique_ptr<Entry>> entries_;  // by id: oldest first
  LogBudget log_budget_{20, 10};
  std::atomic<uint64_t>* refused_ = nullptr;
};

// The key under which a peer's handshakes are counted: "ip:ADDRESS" for TCP (no port), or
// "uid:N" for shm.
std::string PeerKey(const PendingConnection& pc);

}  // namespace remora::server
