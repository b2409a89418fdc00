// The Prometheus endpoint of remora-server (--metrics-listen tcp://HOST:PORT): a minimal
// HTTP/1.1 server on its own thread that answers GET /metrics with the exposition text.
//
// Contract:
//  - It faces the network, so every input is bounded: a request head (request line and
//    headers) of at most max_request_bytes, io_timeout_ms from accept to the end of the
//    response (a slow or silent client is dropped), at most max_connections at once (more are
//    response (a slow or silent client is dropped), per-peer shares of max_connections
//    (peer_shares.h: at most max_per_peer per address; a peer holding fewer evicts from the
//    one holding most; a refused one gets 503 saying why). Only GET and HEAD; bodies are
//    never read; every response closes the connection. Accept errors (EMFILE) are logged at
//    most once a second and backed off.
//  - Per-tenant and per-session series (`details`) only to a scraper that sends
//    `Authorization: Bearer <bearer_token>` (compared in constant time; a wrong one gets 401)
//    or to everyone with public_details; the others get the aggregate series.
//  - `render` produces the body; it runs on the endpoint's thread, one call at a time, and
//    may block (the supervisor's version waits for its loop thread).
//  - Stop sequence: RequestStop() (any thread, returns at once), then keep whatever
//    `render` waits on running until Finished(), then destroy (joins the thread).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "remora/base/fd.h"
#include "remora/base/status.h"

namespace remora {
class Listener;
}

namespace remora::server {

struct MetricsServerOptions {
  std::string listen_url;  // tcp://HOST:PORT (port 0: any free port)
  size_t max_request_bytes = 8192;
  int io_timeout_ms = 5000;
  int max_connections = 16;
  size_t max_per_peer = 4;
  std::string bearer_token{};   // "": no scraper gets the details (unless public_details)
  bool public_details = false;  // everyone gets the per-tenant and per-session series
};

// The bearer token in `path` (its first line), created (mode 0600, 32 random bytes in
// base64url) if the file does not exist. Never through a symbolic link; must be a regular
// file of this uid (the scraper reads its own copy: Prometheus' credentials_file).
Result<std::string> LoadOrCreateMetricsToken(const std::string& path);

class MetricsServer {
 public:
  using Render = std::function<std::string(bool details)>;

  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // Binds (an error here stops the server) and starts the thread.
  static Result<std::unique_ptr<MetricsServer>> Start(const MetricsServerOptions& options, Render render);

  void RequestStop();
  bool Finished() const { return finished_.load(); }
  // The URL of /metrics with the real port, e.g. http://127.0.0.1:9464/metrics.
  const std::string& url() const { return url_; }

 private:
  struct Connection;
  MetricsServer(const MetricsServerOptions& options, Render render);
  void ThreadMain();
  void Respond(Connection& c);

  bool Authorized(std::string_view authorization) const;

  MetricsServerOptions options_;
  Render render_;
  std::unique_ptr<Listener> listener_;
  Fd wake_fd_;
  std::string url_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> finished_{false};
  std::thread thread_;
};

// Parses a request head "METHOD TARGET HTTP/1.x\r\n...": the status to answer (200, 400,
// 404, 405, 505) and, for 200, whether the body is wanted (GET) or not (HEAD). Exposed for
// unit tests.
struct HttpVerdict {
  int status = 400;
  bool head_only = false;
  bool metrics = false;  // /metrics (else the index page)
  std::string authorization;  // the Authorization header's value, if any
  bool has_authorization = false;
};
HttpVerdict ParseRequestHead(std::string_view head);

}  // namespace remora::server
