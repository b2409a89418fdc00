#include "supervisor/metrics_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sodium.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <vector>

#include "remora/base/log.h"
#include "remora/base/util.h"
#include "remora/protocol/transport.h"
#include "supervisor/handshakes.h"
#include "supervisor/peer_shares.h"

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
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
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
  // The first Authorization header (its name in any case), its value without surrounding blanks.
  for (size_t at = eol; at != std::string_view::npos && at + 1 < head.size();) {
    size_t next = head.find('\n', at + 1);
    std::string_view h = head.substr(at + 1, next == std::string_view::npos ? std::string_view::npos : next - at - 1);
    at = next;
    if (!h.empty() && h.back() == '\r') h.remove_suffix(1);
    size_t colon = h.find(':');
    if (colon == std::string_view::npos) continue;
    std::string name(h.substr(0, colon));
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (name != "authorization") continue;
    std::string_view value = h.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
    v.authorization = std::string(value);
    v.has_authorization = true;
    break;
  }
  return v;
}

Result<std::string> LoadOrCreateMetricsToken(const std::string& path) {
  if (sodium_init() < 0) return Error(Err::kInitializationError, "libsodium cannot start");
  Fd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd && errno == ENOENT) {
    unsigned char raw[32];
    randombytes_buf(raw, sizeof(raw));
    char b64[sodium_base64_ENCODED_LEN(32, sodium_base64_VARIANT_URLSAFE_NO_PADDING)];
    sodium_bin2base64(b64, sizeof(b64), raw, sizeof(raw), sodium_base64_VARIANT_URLSAFE_NO_PADDING);
    std::string token = b64;
    Fd out(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!out) return ErrnoStatus(Err::kInitializationError, "create the metrics token file " + path, errno);
    std::string line = token + "\n";
    if (::write(out.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size()))
      return ErrnoStatus(Err::kInitializationError, "write " + path, errno);
    LOG_INFO("metrics: created the scrapers' bearer token in {}", path);
    return token;
  }
  if (!fd) return ErrnoStatus(Err::kInitializationError, "open the metrics token file " + path, errno);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid())
    return Error(Err::kInitializationError, "metrics token file {}: must be a regular file of uid {}", path, ::geteuid());
  if (st.st_mode & 004) LOG_WARN("metrics token file {} is readable by every user of this host", path);
  char buf[512];
  ssize_t n = ::read(fd.get(), buf, sizeof(buf));
  if (n <= 0) return Error(Err::kInitializationError, "metrics token file {} is empty", path);
  std::string token(buf, static_cast<size_t>(n));
  token = token.substr(0, token.find('\n'));
  while (!token.empty() && (token.back() == '\r' || token.back() == ' ' || token.back() == '\t')) token.pop_back();
  if (token.size() < 16)
    return Error(Err::kInitializationError, "metrics token file {}: the token must be at least 16 characters", path);
  return token;
}

struct MetricsServer::Connection {
  Fd fd;
  std::string head;
  uint64_t deadline_ns = 0;
  bool done = false;
  uint64_t id = 0;  // in the per-peer shares
};

bool MetricsServer::Authorized(std::string_view authorization) const {
  const std::string& t = options_.bearer_token;
  constexpr std::string_view kScheme = "Bearer ";
  if (t.empty() || authorization.size() != kScheme.size() + t.size()) return false;
  std::string scheme(authorization.substr(0, kScheme.size()));
  for (char& c : scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (scheme != "bearer ") return false;
  return sodium_memcmp(authorization.data() + kScheme.size(), t.data(), t.size()) == 0;
}

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
  LOG_INFO("Prometheus metrics on {} ({})", m->url_,
           options.public_details            ? "every scraper gets the tenant and session series"
           : !options.bearer_token.empty()   ? "tenant and session series with the bearer token only"
                                             : "server and GPU series only: no tenant or session series");
  return m;
}

void MetricsServer::RequestStop() {
  stop_.store(true);
  uint64_t one = 1;
  if (wake_fd_) (void)!::write(wake_fd_.get(), &one, sizeof(one));
}

void MetricsServer::Respond(Connection& c) {
  c.done = true;
  HttpVerdict v = c.head.size() > options_.max_request_bytes ? HttpVerdict{431, false, false, {}, false} : ParseRequestHead(c.head);
  std::string body, type = "text/plain; charset=utf-8", extra;
  bool details = options_.public_details;
  if (v.status == 200 && v.metrics && v.has_authorization && !options_.bearer_token.empty()) {
    // Wrong credentials are an error the scraper's owner must see (a target down), not a
    // quiet answer without the details.
    if (Authorized(v.authorization)) details = true;
    else v = HttpVerdict{401, v.head_only, false, {}, false};
  }
  if (v.status == 200 && v.metrics) {
    body = render_(details);
    type = kExpositionType;
  } else if (v.status == 200) {
    body = "remora-server: Prometheus metrics are at /metrics\n";
  } else {
    body = fmt::format("{} {}\n", v.status, Reason(v.status));
    if (v.status == 405) extra = "Allow: GET, HEAD\r\n";
    if (v.status == 401) extra = "WWW-Authenticate: Bearer realm=\"remora\"\r\n";
  }
  std::string response = fmt::format("HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n{}Connection: close\r\n\r\n",
                                     v.status, Reason(v.status), type, body.size(), extra);
  if (!v.head_only) response += body;
  SendAll(c.fd.get(), response, c.deadline_ns);
}

void MetricsServer::ThreadMain() {
  std::vector<Connection> conns;
  PeerShares shares(static_cast<size_t>(std::max(options_.max_connections, 1)), std::max<size_t>(options_.max_per_peer, 1),
                    "are open");
  LogBudget refusals(5, 10);
  uint64_t next_id = 1;
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
        std::string peer = PeerShareKeyOf(fd.get());
        PeerShares::Decision d = shares.Admit(peer);
        if (!d.admit) {  // told why, best effort, and closed
          std::string body = "remora-server: the metrics endpoint is busy: " + d.refusal + "\n";
          std::string r = fmt::format("HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
                                      "Content-Length: {}\r\nConnection: close\r\n\r\n{}", body.size(), body);
          // Read what the request sent already: closing with unread bytes would reset the
          // connection, which may discard the answer at the client.
          char sink[2048];
          (void)!::recv(fd.get(), sink, sizeof(sink), MSG_DONTWAIT);
          (void)!::send(fd.get(), r.data(), r.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
          ::shutdown(fd.get(), SHUT_WR);
          uint64_t dropped = 0;
          if (refusals.Allow(&dropped))
            LOG_WARN("metrics endpoint: connection from {} refused: {}{}", peer, d.refusal,
                     dropped ? fmt::format(" ({} similar lines left out)", dropped) : "");
          continue;
        }
        if (d.evict)
          for (auto& c : conns)
            if (c.id == *d.evict) c.done = true;  // dropped without an answer, as if too slow
        uint64_t id = next_id++;
        shares.Add(id, peer);
        conns.push_back(Connection{std::move(fd), {}, now + uint64_t(options_.io_timeout_ms) * 1'000'000, false, id});
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
    for (const auto& c : conns)
      if (c.done) shares.Remove(c.id);
    conns.erase(std::remove_if(conns.begin(), conns.end(), [](const Connection& c) { return c.done; }), conns.end());
  }
  conns.clear();
  finished_.store(true);
}

}  // namespace remora::server
