// PeerLinks: the supervisors of a cluster's servers talking to each other, for NCCL: a session
// on one server presents a unique id (capability) another server made, and the two supervisors
// resolve it and then tell each other when a member of the communicator is gone
// (nccl_registry.h, docs/ARCHITECTURE.md "NCCL").
//
// Security (docs/SECURITY.md): the operator gives the servers of a cluster one shared key
// (--peer-key-file, mode 0600, at least 32 bytes). A link starts with an exchange of random
// nonces in which each side proves it knows the key (HMAC-SHA-256 over both nonces and both
// server ids, with a label per direction), and derives a key per direction; every later frame
// is sealed with it (XSalsa20-Poly1305, counters as nonces), so a peer without the key can
// neither join nor read nor alter what crosses (unique ids among it). A server dials only the
// addresses the operator allowed (--peer), whatever a capability names.
//
// Liveness: both ends send a heartbeat every 250 ms; a link silent for the deadline (the
// server's --deadline) is down, as is one whose connection closed or that does not take a frame
// within the deadline. A link that goes down is reported once (Handlers::down); the supervisor
// treats every member behind it as gone.
//
// Threads: one that accepts, and one per link (blocking I/O with short polls); the handlers
// run on the supervisor's loop thread (through `post`). Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "remora/base/fd.h"
#include "remora/base/status.h"

namespace remora::server {

struct PeerOptions {
  std::string listen;                // tcp://HOST:PORT this server serves peers on, or ""
  std::vector<std::string> allowed;  // HOST:PORT of peers this server may dial
  std::string key_file;              // the cluster's shared key
  double deadline_s = 10;
};

class PeerLinks {
 public:
  using Poster = std::function<void(std::function<void()>)>;
  struct Handlers {
    // A message arrived on `link` (from server `server`).
    std::function<void(uint64_t link, uint64_t server, std::vector<uint8_t> message)> message;
    // `link` is down (it was to server `server`, 0 if it never came up), and why.
    std::function<void(uint64_t link, uint64_t server, const std::string& why)> down;
  };

  static Result<std::unique_ptr<PeerLinks>> Start(const PeerOptions& options, uint64_t server_id, Poster post,
                                                  Handlers handlers);
  ~PeerLinks();
  PeerLinks(const PeerLinks&) = delete;
  PeerLinks& operator=(const PeerLinks&) = delete;

  // The link to `address` ("HOST:PORT"), connecting in the background if there is none up or
  // coming up; refused unless the operator allowed the address.
  Result<uint64_t> Dial(const std::string& address);
  // Queues `message` on `link`; dropped if the link is down.
  void Send(uint64_t link, std::vector<uint8_t> message);

 private:
  struct Link;
  PeerLinks(const PeerOptions& o, uint64_t server_id, Poster post, Handlers h);
  void Accept();
  void RunLink(std::shared_ptr<Link> link);

  PeerOptions options_;
  uint64_t server_id_;
  Poster post_;
  Handlers handlers_;
  std::array<uint8_t, 32> key_{};
  Fd listen_;
  std::atomic<bool> stop_{false};
  std::thread acceptor_;
  std::mutex mu_;
  uint64_t next_ = 1;
  std::map<uint64_t, std::shared_ptr<Link>> links_;
  std::vector<std::thread> finished_;  // threads of links that went down (joined at the end)
};

}  // namespace remora::server
