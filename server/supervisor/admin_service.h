// The administration API (server/common/admin.capnp) of one remora-server.
//
// Contract:
//  - Serves <state-dir>/admin.sock (mode 0600; a connecting peer must be root or the
//    server's own uid, checked with SO_PEERCRED, and not a session worker; others are
//    disconnected and logged) and, with an admin listen URL, tcp://HOST:PORT where every
//    connection is a sealed channel (common/admin_channel.h: an X25519 exchange, then every
//    byte encrypted and authenticated) in which clients log in with the admin token by
//    challenge-response bound to the channel (one challenge per connection, within 10 s of
//    accept, and the server proves itself in return).
//  - At most 16 connections on the unix socket; on TCP per-peer shares (admin_tcp.h: at most
//    4 connections per address not logged in, 32 in all, a peer holding fewer evicts from the
//    one holding most; refusals say why). Accept errors (out of descriptors) are retried
//    after a pause, never the end of the admin API; warnings are rate-limited.
//  - Runs Cap'n Proto RPC on its own thread with its own kj event loop. Every request runs
//    on the supervisor's loop thread through Supervisor::Call, one at a time.
//  - Stop sequence (the supervisor's loop thread): RequestStop(), keep running queued Calls
//    until Finished(), then destroy. The thread may be blocked inside a Call, so the loop
//    thread must not simply join it.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "remora/base/fd.h"
#include "remora/base/status.h"
#include "remora/protocol/auth.h"

namespace remora::server {

class Supervisor;

struct AdminOptions {
  std::string state_dir;        // admin.sock goes here
  std::string listen_url;       // "" or tcp://HOST:PORT
  std::string token_file;       // with listen_url: the admin token (created if missing)
};

class AdminServer {
 public:
  ~AdminServer();
  AdminServer(const AdminServer&) = delete;
  AdminServer& operator=(const AdminServer&) = delete;

  // Binds the sockets (errors here stop the server) and starts the RPC thread.
  static Result<std::unique_ptr<AdminServer>> Start(Supervisor& sup, const AdminOptions& options);

  // Asks the RPC thread to end; returns at once (thread-safe, idempotent).
  void RequestStop();
  // True once the RPC thread has ended.
  bool Finished() const { return finished_.load(); }

  const std::string& socket_path() const { return socket_path_; }
  const std::string& tcp_url() const { return tcp_url_; }  // with its real port; "" if none

 private:
  struct Shared;
  explicit AdminServer(Supervisor& sup);
  void ThreadMain();

  Supervisor& sup_;
  std::string socket_path_;
  std::string tcp_url_;
  Fd unix_fd_, tcp_fd_;
  Verifier admin_key_{};        // verifier of the admin token (TCP only)
  std::shared_ptr<Shared> shared_;
  std::atomic<bool> finished_{false};
  std::thread thread_;
};

}  // namespace remora::server
