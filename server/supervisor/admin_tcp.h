// The admin API's TCP connections (admin_service.h): each one a sealed channel
// (common/admin_channel.h) in which the client logs in with the admin token, under per-peer
// shares (peer_shares.h) and one deadline from accept to login.
//
// Contract:
//  - Admit takes a freshly accepted connection. A peer (address) holds at most kPerPeer
//    connections that have not logged in; with all kMaxConnections taken, a newcomer evicts
//    the oldest such connection of the peer holding the most, if it holds more than the
//    newcomer. A refused connection is told why in the channel's refusal message, then closed.
//  - A connection that has not finished the key exchange and logged in within kLoginDeadline
//    is closed.
//  - Runs on the admin API's thread and kj event loop; not thread-safe.
#pragma once

#include <capnp/capability.h>
#include <kj/async-io.h>

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "common/admin_channel.h"
#include "supervisor/handshakes.h"
#include "supervisor/peer_shares.h"

namespace remora::server {

// One TCP connection's login state: its channel's keys (the login covers their binding), one
// challenge per connection, one proof per challenge.
struct AdminLoginState {
  admin::ChannelKeys keys;
  bool challenged = false;
  bool logged_in = false;
  std::function<void()> on_login;  // called once, when the proof was right
};

class TcpAdminConnections final : private kj::TaskSet::ErrorHandler {
 public:
  static constexpr size_t kMaxConnections = 32;
  static constexpr size_t kPerPeer = 4;
  static constexpr kj::Duration kLoginDeadline = 10 * kj::SECONDS;
  // The bootstrap capability of a connection whose channel is up (AdminLogin).
  using MakeLogin = std::function<capnp::Capability::Client(std::shared_ptr<AdminLoginState>)>;

  TcpAdminConnections(kj::Timer& timer, MakeLogin make_login);
  ~TcpAdminConnections();

  void Admit(kj::Own<kj::AsyncIoStream> stream);

 private:
  struct Connection;
  void taskFailed(kj::Exception&&) override {}
  kj::Promise<void> Serve(std::string peer, kj::Own<kj::AsyncIoStream> stream, std::shared_ptr<AdminLoginState> state,
                          kj::Promise<void> evicted);
  void Warn(const std::string& line);

  kj::Timer& timer_;
  MakeLogin make_login_;
  PeerShares shares_{kMaxConnections, kPerPeer};
  std::map<uint64_t, kj::Own<kj::PromiseFulfiller<void>>> evict_;  // by connection id
  uint64_t next_id_ = 1;
  int refusing_ = 0;  // refusals being written
  LogBudget budget_{5, 10};
  kj::TaskSet tasks_;  // last: destroyed (cancelling every connection) before the rest
};

}  // namespace remora::server
