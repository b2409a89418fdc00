// The /metrics endpoint's pieces: the exposition text (names, types, labels, escaping) and
// the HTTP server's handling of good, bad, oversized, slow and surplus requests, over real
// sockets on 127.0.0.1 with a fake render function.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "remora/base/fd.h"
#include "remora/base/util.h"
#include "supervisor/metrics.h"
#include "supervisor/metrics_server.h"

namespace remora::server {
namespace {

MetricsSnapshot Sample() {
  MetricsSnapshot s;
  s.version = "0.1.0";
  s.backend = "host-emulated";
  s.emulated = true;
  s.started_at = 1700000000;
  s.handshakes_accepted = 3;
  s.handshakes_refused = 1;
  s.sessions_started = 3;
  s.sessions_lost = 1;
  s.gpus = {{0, "GPU \"zero\"", "aa", "0000:80:00.0", 16ull << 30, 96ull << 20, true, true}};
  MetricsSnapshot::Tenant a;
  a.name = "alice";
  a.memory_limit = 1ull << 30;
  a.refused = 2;
  a.sessions = 1;
  a.gpus = {{0, true, 96ull << 20, 0, 2'500'000'000}};
  a.compute_weight = 3000;
  a.compute_max = 0.5;
  a.priority = "high";
  MetricsSnapshot::Tenant b;
  b.name = "bob";  // unlimited: no limit series
  b.gpus = {{0, true, 0, 0, 0}};
  s.tenants = {a, b};
  MetricsSnapshot::Session x;
  x.id = 7;
  x.tenant = "alice";
  x.transport = "shm";
  x.data_path = "shared-memory";
  x.program = "evil\"\\\n\x1b[2Jname";
  x.user = "u";
  x.host = "h";
  x.started_at = 1700000100;
  x.memory_used = 96ull << 20;
  x.has_counters = true;
  x.calls = 42;
  x.bytes_to_device = 4096;
  x.bytes_from_device = 8192;
  x.gpu_time_ns = 1'250'000'000;
  s.sessions = {x};
  return s;
}

bool Has(const std::string& text, const std::string& line) { return text.find(line + "\n") != std::string::npos; }

TEST(MetricsText, NamesTypesAndValues) {
  std::string t = RenderMetrics(Sample(), {});
  EXPECT_TRUE(Has(t, "# TYPE remora_handshakes_total counter"));
  EXPECT_TRUE(Has(t, "remora_handshakes_total{result=\"accepted\"} 3"));
  EXPECT_TRUE(Has(t, "remora_handshakes_total{result=\"refused\"} 1"));
  EXPECT_TRUE(Has(t, "remora_sessions_lost_total 1"));
  EXPECT_TRUE(Has(t, "remora_build_info{version=\"0.1.0\",backend=\"host-emulated\",emulated=\"true\"} 1"));
  EXPECT_TRUE(Has(t, "remora_gpu_memory_used_bytes{gpu=\"0\"} 100663296"));
  EXPECT_TRUE(Has(t, "remora_tenant_memory_limit_bytes{tenant=\"alice\",gpu=\"0\"} 1073741824"));
  EXPECT_EQ(t.find("remora_tenant_memory_limit_bytes{tenant=\"bob\""), std::string::npos) << "unlimited has no limit";
  EXPECT_TRUE(Has(t, "remora_tenant_memory_used_bytes{tenant=\"alice\",gpu=\"0\"} 100663296"));
  EXPECT_TRUE(Has(t, "remora_tenant_allocations_refused_total{tenant=\"alice\"} 2"));
  EXPECT_TRUE(Has(t, "remora_session_calls_total{session=\"7\",tenant=\"alice\"} 42"));
  EXPECT_TRUE(Has(t, "remora_session_transferred_bytes_total{session=\"7\",tenant=\"alice\",direction=\"host_to_device\"} 4096"));
  EXPECT_TRUE(Has(t, "remora_session_transferred_bytes_total{session=\"7\",tenant=\"alice\",direction=\"device_to_host\"} 8192"));
  EXPECT_TRUE(Has(t, "remora_gpu_compute_enforced{gpu=\"0\"} 1"));
  EXPECT_TRUE(Has(t, "remora_gpu_mps_active{gpu=\"0\"} 1"));
  EXPECT_TRUE(Has(t, "# TYPE remora_tenant_gpu_time_seconds_total counter"));
  EXPECT_TRUE(Has(t, "remora_tenant_gpu_time_seconds_total{tenant=\"alice\",gpu=\"0\"} 2.5"));
  EXPECT_TRUE(Has(t, "remora_tenant_gpu_time_seconds_total{tenant=\"bob\",gpu=\"0\"} 0"));
  EXPECT_TRUE(Has(t, "remora_tenant_compute_weight{tenant=\"alice\",priority=\"high\"} 3000"));
  EXPECT_TRUE(Has(t, "remora_tenant_compute_weight{tenant=\"bob\",priority=\"normal\"} 100"));
  EXPECT_TRUE(Has(t, "remora_tenant_compute_max_ratio{tenant=\"alice\"} 0.5"));
  EXPECT_EQ(t.find("remora_tenant_compute_max_ratio{tenant=\"bob\""), std::string::npos) << "no cap, no series";
  EXPECT_TRUE(Has(t, "remora_session_gpu_time_seconds_total{session=\"7\",tenant=\"alice\"} 1.25"));
  // Every family is announced once, and every sample line belongs to the family above it.
  std::string family;
  size_t pos = 0;
  while (pos < t.size()) {
    size_t eol = t.find('\n', pos);
    ASSERT_NE(eol, std::string::npos) << "the text ends with a newline";
    std::string line = t.substr(pos, eol - pos);
    pos = eol + 1;
    if (line.rfind("# TYPE ", 0) == 0) {
      family = line.substr(7, line.find(' ', 7) - 7);
      EXPECT_EQ(t.find("# TYPE " + family + " "), t.rfind("# TYPE " + family + " ")) << family;
    } else if (line[0] != '#') {
      EXPECT_EQ(line.rfind(family, 0), 0u) << line;
    }
  }
  // No NVML readings: no utilisation series.
  EXPECT_EQ(t.find("remora_gpu_utilization_ratio"), std::string::npos);
}

TEST(MetricsText, ClientSuppliedLabelsAreEscaped) {
  std::string t = RenderMetrics(Sample(), {});
  EXPECT_NE(t.find("program=\"evil\\\"\\\\??[2Jname\""), std::string::npos) << t;
  EXPECT_EQ(LabelValue(std::string(300, 'x')).size(), 128u);
  EXPECT_EQ(LabelValue("caf\xc3\xa9"), "caf??");
  EXPECT_TRUE(Has(RenderMetrics(Sample(), {}), "remora_gpu_info{gpu=\"0\",name=\"GPU \\\"zero\\\"\",uuid=\"aa\","
                                              "pci_bus_id=\"0000:80:00.0\",backend=\"host-emulated\"} 1"));
}

TEST(MetricsText, NvmlReadingsWhenPresent) {
  std::vector<GpuSample> samples = {{"0000:80:00.0", 0.25, 123456}};
  std::string t = RenderMetrics(Sample(), samples);
  EXPECT_TRUE(Has(t, "remora_gpu_utilization_ratio{gpu=\"0\"} 0.25"));
  EXPECT_TRUE(Has(t, "remora_gpu_device_memory_used_bytes{gpu=\"0\"} 123456"));
}

TEST(HttpHead, Verdicts) {
  EXPECT_EQ(ParseRequestHead("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").status, 200);
  EXPECT_TRUE(ParseRequestHead("GET /metrics?x=1 HTTP/1.0\r\n\r\n").metrics);
  EXPECT_FALSE(ParseRequestHead("GET / HTTP/1.1\r\n\r\n").metrics);
  EXPECT_TRUE(ParseRequestHead("HEAD /metrics HTTP/1.1\r\n\r\n").head_only);
  EXPECT_EQ(ParseRequestHead("POST /metrics HTTP/1.1\r\n\r\n").status, 405);
  EXPECT_EQ(ParseRequestHead("GET /other HTTP/1.1\r\n\r\n").status, 404);
  EXPECT_EQ(ParseRequestHead("GET /metrics HTTP/2.0\r\n\r\n").status, 505);
  EXPECT_EQ(ParseRequestHead("GET  /metrics HTTP/1.1\r\n\r\n").status, 400);
  EXPECT_EQ(ParseRequestHead("GET metrics HTTP/1.1\r\n\r\n").status, 400);
  EXPECT_EQ(ParseRequestHead("GET /metrics\r\n\r\n").status, 400);
  EXPECT_EQ(ParseRequestHead(std::string("GET /met\0rics HTTP/1.1\r\n\r\n", 27)).status, 400);
  EXPECT_EQ(ParseRequestHead("\x16\x03\x01\x02\x00").status, 400);  // a TLS ClientHello
  EXPECT_EQ(ParseRequestHead("").status, 400);
}

class MetricsServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MetricsServerOptions o;
    o.listen_url = "tcp://127.0.0.1:0";
    o.io_timeout_ms = 300;
    o.max_request_bytes = 1024;
    o.max_connections = 2;
    o.bearer_token = token_;
    o.public_details = public_details_;
    auto s = MetricsServer::Start(o, [this](bool details) {
      renders_++;
      last_details_ = details;
      return std::string("remora_x 1\n");
    });
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(*s);
    port_ = static_cast<uint16_t>(std::stoi(server_->url().substr(server_->url().rfind(':') + 1)));
  }
  void TearDown() override {
    if (server_) {
      server_->RequestStop();
      server_.reset();
    }
  }
  Fd Open() {
    Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    struct sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_port = htons(port_);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    return fd;
  }
  // Everything the server sends until it closes (or 3 s pass).
  static std::string ReadAll(int fd) {
    std::string out;
    uint64_t deadline = MonotonicNanos() + 3'000'000'000ull;
    while (MonotonicNanos() < deadline) {
      struct pollfd p = {fd, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      char buf[4096];
      ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) return out;
      out.append(buf, static_cast<size_t>(n));
    }
    return out + "<still open>";
  }
  std::string Exchange(const std::string& request) {
    Fd fd = Open();
    EXPECT_EQ(::send(fd.get(), request.data(), request.size(), MSG_NOSIGNAL), static_cast<ssize_t>(request.size()));
    return ReadAll(fd.get());
  }

  std::unique_ptr<MetricsServer> server_;
  uint16_t port_ = 0;
  std::atomic<int> renders_{0};
  std::atomic<bool> last_details_{false};
  std::string token_ = "scraper-token-0123456789";
  bool public_details_ = false;
};

TEST_F(MetricsServerTest, ServesMetrics) {
  std::string r = Exchange("GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r;
  EXPECT_NE(r.find("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"), std::string::npos);
  EXPECT_NE(r.find("Content-Length: 11\r\n"), std::string::npos);
  EXPECT_NE(r.find("Connection: close\r\n\r\nremora_x 1\n"), std::string::npos);
  EXPECT_EQ(renders_.load(), 1);
  std::string h = Exchange("HEAD /metrics HTTP/1.0\r\n\r\n");
  EXPECT_EQ(h.rfind("HTTP/1.1 200 OK\r\n", 0), 0u);
  EXPECT_EQ(h.find("remora_x"), std::string::npos) << "HEAD has no body";
}

TEST_F(MetricsServerTest, RefusesWhatItDoesNotServe) {
  EXPECT_EQ(Exchange("GET /secret HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404 ", 0), 0u);
  std::string r = Exchange("DELETE /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 405 ", 0), 0u);
  EXPECT_NE(r.find("Allow: GET, HEAD\r\n"), std::string::npos);
  EXPECT_EQ(Exchange("garbage\r\n\r\n").rfind("HTTP/1.1 400 ", 0), 0u);
  EXPECT_EQ(renders_.load(), 0);
}

TEST_F(MetricsServerTest, OversizedHeadIsCutOff) {
  std::string big = "GET /metrics HTTP/1.1\r\nX: " + std::string(4000, 'a') + "\r\n\r\n";
  std::string r = Exchange(big);
  EXPECT_EQ(r.rfind("HTTP/1.1 431 ", 0), 0u) << r.substr(0, 100);
  EXPECT_EQ(renders_.load(), 0);
}

TEST_F(MetricsServerTest, SilentAndSurplusClientsDoNotStopIt) {
  // Two silent clients fill the connection slots, a third is closed at once, and after the
  // timeout the silent ones are dropped and the endpoint serves again.
  Fd a = Open(), b = Open();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  Fd c = Open();
  std::string surplus = ReadAll(c.get());
  EXPECT_EQ(surplus.rfind("HTTP/1.1 503 ", 0), 0u) << "the surplus connection is refused, saying why: " << surplus;
  EXPECT_NE(surplus.find("all 2 connections are in use"), std::string::npos) << surplus;
  EXPECT_EQ(ReadAll(a.get()), "") << "a silent client is dropped after the timeout";
  EXPECT_EQ(ReadAll(b.get()), "");
  EXPECT_EQ(Exchange("GET /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 200 OK\r\n", 0), 0u);
}

TEST_F(MetricsServerTest, SlowDripHitsTheDeadline) {
  // One byte at a time does not extend the deadline: it counts from accept.
  Fd fd = Open();
  uint64_t start = MonotonicNanos();
  std::string req = "GET /metrics HTTP/1.1\r\n";
  for (char ch : req) {
    if (::send(fd.get(), &ch, 1, MSG_NOSIGNAL) != 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(40));
    if (MonotonicNanos() - start > 1'000'000'000ull) break;
  }
  EXPECT_EQ(ReadAll(fd.get()), "");
  EXPECT_EQ(renders_.load(), 0);
}

// N9: the details (tenant and session series) only with the bearer token; a wrong one is a
// 401; without one, the aggregate series.
TEST_F(MetricsServerTest, DetailsOnlyWithTheBearerToken) {
  std::string anonymous = Exchange("GET /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(anonymous.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << anonymous;
  EXPECT_FALSE(last_details_.load());
  std::string good = Exchange("GET /metrics HTTP/1.1\r\nauthorization:  bearer " + token_ + " \r\n\r\n");
  EXPECT_EQ(good.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << good;
  EXPECT_TRUE(last_details_.load());
  int renders = renders_.load();
  for (const std::string& bad : {"Bearer " + token_ + "x", "Bearer " + token_.substr(1), std::string("Basic eDp5"),
                                 std::string("Bearer ")}) {
    std::string r = Exchange("GET /metrics HTTP/1.1\r\nAuthorization: " + bad + "\r\n\r\n");
    EXPECT_EQ(r.rfind("HTTP/1.1 401 ", 0), 0u) << bad << ": " << r;
    EXPECT_NE(r.find("WWW-Authenticate: Bearer"), std::string::npos) << r;
  }
  EXPECT_EQ(renders_.load(), renders) << "a wrong token got a rendering";
}

TEST(HttpHead, Authorization) {
  HttpVerdict v = ParseRequestHead("GET /metrics HTTP/1.1\r\nHost: x\r\nAUTHORIZATION: Bearer abc \r\nAuthorization: second\r\n\r\n");
  EXPECT_TRUE(v.has_authorization);
  EXPECT_EQ(v.authorization, "Bearer abc");
  EXPECT_FALSE(ParseRequestHead("GET /metrics HTTP/1.1\r\nX-Authorization: Bearer abc\r\n\r\n").has_authorization);
  EXPECT_FALSE(ParseRequestHead("GET /metrics HTTP/1.1\r\n\r\n").has_authorization);
}

TEST(RenderMetrics, WithoutDetailsNoTenantOrSession) {
  std::string t = RenderMetrics(Sample(), {}, /*details=*/false);
  EXPECT_NE(t.find("remora_build_info"), std::string::npos);
  EXPECT_NE(t.find("remora_sessions "), std::string::npos);
  EXPECT_NE(t.find("remora_gpu_memory_used_bytes"), std::string::npos);
  EXPECT_EQ(t.find("remora_tenant_"), std::string::npos) << t;
  EXPECT_EQ(t.find("remora_session_"), std::string::npos) << t;
  EXPECT_EQ(t.find("tenant="), std::string::npos) << t;
}

TEST(MetricsServerStart, RefusesNonTcpUrls) {
  auto s = MetricsServer::Start({"shm:///tmp/x.sock"}, [](bool) { return std::string(); });
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("tcp://HOST:PORT"), std::string::npos);
}

}  // namespace
}  // namespace remora::server
