#include "supervisor/metrics_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "remora/base/log.h"
#include "remora/base/util.h"
#include "remora/protocol/transport.h"

namespace remora::server {
namespace {

constexpr char kExpositionType[] = "text/plain; version=0.0.4; charset=utf-8";
constexpr int kMaxAcceptsPerWake = 16;
constexpr uint64_t kAcceptBackoffNs = 100'000'000;
constexpr uint64_t kErrorLogIntervalNs = 1'000'000'000;

const char* Reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 431: return "Request Header Fields Too Large";
    case 505: return "HTTP Version Not Supported";
  }
  return "Internal Server Error";
}

bool IsTokenChar(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '-'; }

// Sends everything within the deadline, or gives up (the client is too slow).
void SendAll(int fd, std::string_view data, uint64_t deadline_ns) {
  while (!data.empty()) {
    uint64_t now = MonotonicNanos();
    if (now >= deadline_ns) return;
    struct pollfd p = {fd, POLLOUT, 0};
    if (::poll(&p, 1, static_cast<int>((deadline_ns - now) / 1'000'000) + 1) <= 0) return;
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) return;
    data.remove_prefix(static_cast<size_t>(n));
  }
}

}  // namespace

HttpVerdict ParseRequestHead(std::string_view head) {
  HttpVerdict v;
  for (char c : head)
    if ((static_cast<unsigned char>(c) < 0x20 && c != '\r' && c != '\n' && c != '\t') || c == 0x7f) return v;
  size_t eol = head.find('\n');
  std::string_view line = head.substr(0, eol);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  size_t sp1 = line.find(' ');
  size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos) return v;
  std::string_view method = line.substr(0, sp1);
  std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  std::string_view version = line.substr(sp2 + 1);
  if (method.empty() || !std::all_of(method.begin(), method.end(), IsTokenChar)) return v;
  if (target.empty() || target[0] != '/') return v;
  if (version.substr(0, 5) != "HTTP/") return v;
  if (version != "HTTP/1.1" && version != "HTTP/1.0") {
    v.status = 505;
    return v;
  }
  if (method != "GET" && method != "HEAD") {
    v.status = 405;
    return v;
  }
  std::string_view path = target.substr(0, target.find('?'));
  if (path == "/metrics") v.metrics = true;
  else if (path != "/") {
    v.status = 404;
    return v;
  }
  v.status = 200;
  v.head_only = method == "HEAD";
  return v;
}

struct MetricsServer::Connection {
  Fd fd;
  std::string head;
  uint64_t deadline_ns = 0;
  bool done = false;
};

MetricsServer::MetricsServer(const MetricsServerOptions& options, Render render)
    : options_(options), render_(std::move(render)) {}

MetricsServer::~MetricsServer() {
  RequestStop();
  if (thread_.joinable()) thread_.join();
}

Result<std::unique_ptr<MetricsServer>> MetricsServer::Start(const MetricsServerOptions& options, Render render) {
  ASSIGN_OR_RETURN(Endpoint ep, ParseEndpoint(options.listen_url));
  if (ep.kind != TransportKind::kTcp)
    return Error(Err::kInvalidValue, "--metrics-listen needs a tcp://HOST:PORT URL, not {}", options.listen_url);
  std::unique_ptr<MetricsServer> m(new MetricsServer(options, std::move(render)));
  auto listener = Listen(ep);
  if (!listener.ok()) return Error(Err::kInitializationError, "metrics endpoint: {}", listener.status().message());
  m->listener_ = std::move(*listener);
  int fl = ::fcntl(m->listener_->fd(), F_GETFL);
  ::fcntl(m->listener_->fd(), F_SETFL, fl | O_NONBLOCK);
  m->wake_fd_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!m->wake_fd_) return ErrnoStatus(Err::kInitializationError, "eventfd", errno);
  const Endpoint& bound = m->listener_->endpoint();
  bool v6 = bound.host.find(':') != std::string::npos;
  m->url_ = fmt::format("http://{}{}{}:{}/metrics", v6 ? "[" : "", bound.host, v6 ? "]" : "", bound.port);
  m->thread_ = std::thread([p = m.get()] { p->ThreadMain(); });
  LOG_INFO("Prometheus metrics on {}", m->url_);
  return m;
}

void MetricsServer::RequestStop() {
  stop_.store(true);
  uint64_t one = 1;
  if (wake_fd_) (void)!::write(wake_fd_.get(), &one, sizeof(one));
}

void MetricsServer::Respond(Connection& c) {
  c.done = true;
  HttpVerdict v = c.head.size() > options_.max_request_bytes ? HttpVerdict{431, false, false} : ParseRequestHead(c.head);
  std::string body, type = "text/plain; charset=utf-8", extra;
  if (v.status == 200 && v.metrics) {
    body = render_();
    type = kExpositionType;
  } else if (v.status == 200) {
    body = "remora-server: Prometheus metrics are at /metrics\n";
  } else {
    body = fmt::format("{} {}\n", v.status, Reason(v.status));
    if (v.status == 405) extra = "Allow: GET, HEAD\r\n";
  }
  std::string response = fmt::format("HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n{}Connection: close\r\n\r\n",
                                     v.status, Reason(v.status), type, body.size(), extra);
  if (!v.head_only) response += body;
  SendAll(c.fd.get(), response, c.deadline_ns);
}

void MetricsServer::ThreadMain() {
  std::vector<Connection> conns;
  uint64_t accept_paused_until = 0, last_error_log = 0;
  while (!stop_.load()) {
    uint64_t now = MonotonicNanos();
    std::vector<struct pollfd> pfds;
    pfds.push_back({wake_fd_.get(), POLLIN, 0});
    bool poll_listener = now >= accept_paused_until;
    pfds.push_back({poll_listener ? listener_->fd() : -1, POLLIN, 0});
    uint64_t next = now + 1'000'000'000;
    if (!poll_listener) next = std::min(next, accept_paused_until);
    for (auto& c : conns) {
      pfds.push_back({c.fd.get(), POLLIN, 0});
      next = std::min(next, c.deadline_ns);
    }
    int timeout_ms = next > now ? static_cast<int>((next - now) / 1'000'000) + 1 : 0;
    if (::poll(pfds.data(), pfds.size(), timeout_ms) < 0 && errno != EINTR) {
      LOG_ERROR("metrics endpoint stopped: poll: {}", std::strerror(errno));
      break;
    }
    now = MonotonicNanos();
    if (pfds[1].revents & POLLIN) {
      for (int i = 0; i < kMaxAcceptsPerWake; i++) {
        Fd fd(::accept4(listener_->fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
        if (!fd) {
          if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) break;
          if (now - last_error_log >= kErrorLogIntervalNs) {
            LOG_WARN("metrics endpoint: accept: {} (pausing accepts)", std::strerror(errno));
            last_error_log = now;
          }
          accept_paused_until = now + kAcceptBackoffNs;
          break;
        }
        if (conns.size() >= static_cast<size_t>(options_.max_connections)) continue;  // closed at once
        conns.push_back(Connection{std::move(fd), {}, now + uint64_t(options_.io_timeout_ms) * 1'000'000, false});
      }
    }
    for (size_t i = 0; i < conns.size(); i++) {
      Connection& c = conns[i];
      short re = i + 2 < pfds.size() && pfds[i + 2].fd == c.fd.get() ? pfds[i + 2].revents : 0;
      if (re & (POLLIN | POLLHUP | POLLERR)) {
        char buf[2048];
        ssize_t n = ::recv(c.fd.get(), buf, sizeof(buf), 0);
        if (n <= 0 && !(n < 0 && (errno == EAGAIN || errno == EINTR))) {
          c.done = true;  // the client left before finishing its request
          continue;
        }
        if (n > 0) {  // keep at most one byte past the limit: enough to know it was passed
          size_t room = options_.max_request_bytes + 1 - std::min(c.head.size(), options_.max_request_bytes + 1);
          c.head.append(buf, std::min(static_cast<size_t>(n), room));
        }
        if (c.head.find("\r\n\r\n") != std::string::npos || c.head.find("\n\n") != std::string::npos ||
            c.head.size() > options_.max_request_bytes)
          Respond(c);
      } else if (now >= c.deadline_ns) {
        c.done = true;  // too slow: dropped without an answer
      }
    }
    conns.erase(std::remove_if(conns.begin(), conns.end(), [](const Connection& c) { return c.done; }), conns.end());
  }
  conns.clear();
  finished_.store(true);
}

}  // namespace remora::server
