// N8, N9 (docs/SECURITY.md, "/metrics tells strangers nothing about tenants"): the review
// read every tenant's name, quota and usage and every session's user, host and program off
// /metrics with curl, and the endpoint's 8 connections were anyone's. Real server, real
// sockets; the Prometheus that scrapes with the token is tests/ops/prometheus_test.sh.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>

#include <atomic>

#include "idle_flood.h"
#include "security_support.h"

namespace remora::security {
namespace {

// GET /metrics from 127.0.0.`host`, with `headers` ("Name: value\r\n"...): the whole response.
std::string Get(uint16_t port, const std::string& headers = "", int host = 1) {
  Fd fd = ConnectFrom(host, port);
  if (!fd) return "";
  std::string req = "GET /metrics HTTP/1.1\r\nHost: x\r\n" + headers + "\r\n";
  if (::send(fd.get(), req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) return "";
  std::string out;
  char buf[65536];
  for (;;) {
    struct pollfd p = {fd.get(), POLLIN, 0};
    if (::poll(&p, 1, 10000) <= 0) break;
    ssize_t n = ::recv(fd.get(), buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

class Metrics : public ::testing::Test {
 protected:
  // A server with /metrics (and `extra`), tenant alice with a session (shm).
  void StartServer(std::vector<std::string> extra) {
    token_file_ = s_.server.dir() + "/metrics.token";
    ServerOptions o;
    o.extra_args = {"--metrics-listen", "tcp://127.0.0.1:0"};
    o.extra_args.insert(o.extra_args.end(), extra.begin(), extra.end());
    ASSERT_TRUE(s_.Start(o));
    std::string log = s_.server.Log();
    size_t at = log.find("Prometheus metrics on http://127.0.0.1:");
    ASSERT_NE(at, std::string::npos) << log;
    port_ = static_cast<uint16_t>(std::atoi(log.c_str() + at + std::strlen("Prometheus metrics on http://127.0.0.1:")));
    std::string token = s_.CreateTenant("alice", {"--memory", "64MiB"});
    auto session = RawSession::Open(s_.server.Url("shm"), token);
    ASSERT_TRUE(session.ok()) << session.status().ToString();
    session_ = std::move(*session);
    ASSERT_TRUE(Eventually([&] { return Get(port_, Bearer()).find("remora_sessions 1") != std::string::npos ||
                                        Get(port_).find("remora_sessions 1") != std::string::npos; }));
  }
  std::string Bearer() {
    std::string t = ReadFile(token_file_);
    t = t.substr(0, t.find('\n'));
    return t.empty() ? "" : "Authorization: Bearer " + t + "\r\n";
  }

  TenancyServer s_;
  std::string token_file_;
  uint16_t port_ = 0;
  std::unique_ptr<RawSession> session_;
};

// N9: without the scraper's token, only the server's and the GPUs' series; with it (as
// Prometheus sends it from `authorization: credentials_file`), every tenant and session
// series; a wrong token is a 401, not a quiet answer.
TEST_F(Metrics, TenantsAndSessionsOnlyForTheAuthenticatedScraper) {
  StartServer({"--metrics-token-file", s_.server.dir() + "/metrics.token"});
  struct stat st;
  ASSERT_EQ(::stat(token_file_.c_str(), &st), 0) << "the server did not create the token file";
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  std::string anonymous = Get(port_);
  ASSERT_NE(anonymous.find("HTTP/1.1 200"), std::string::npos) << anonymous;
  EXPECT_NE(anonymous.find("remora_build_info"), std::string::npos);
  EXPECT_NE(anonymous.find("remora_sessions 1"), std::string::npos) << "the aggregates stay public";
  EXPECT_NE(anonymous.find("remora_gpu_memory_used_bytes"), std::string::npos);
  EXPECT_EQ(anonymous.find("alice"), std::string::npos) << anonymous;
  EXPECT_EQ(anonymous.find("remora_tenant_"), std::string::npos) << anonymous;
  EXPECT_EQ(anonymous.find("remora_session_info"), std::string::npos) << anonymous;
  EXPECT_EQ(anonymous.find("program="), std::string::npos) << anonymous;
  std::string scraper = Get(port_, Bearer());
  ASSERT_NE(scraper.find("HTTP/1.1 200"), std::string::npos) << scraper;
  EXPECT_NE(scraper.find("remora_tenant_memory_limit_bytes{tenant=\"alice\",gpu=\"0\"} 67108864"), std::string::npos)
      << scraper;
  EXPECT_NE(scraper.find("remora_session_info{session="), std::string::npos) << scraper;
  std::string wrong = Get(port_, "Authorization: Bearer not-the-token-at-all\r\n");
  EXPECT_NE(wrong.find("HTTP/1.1 401"), std::string::npos) << wrong;
  EXPECT_NE(wrong.find("WWW-Authenticate: Bearer"), std::string::npos) << wrong;
  EXPECT_EQ(wrong.find("alice"), std::string::npos) << wrong;
  std::string basic = Get(port_, "Authorization: Basic YWxpY2U6YWxpY2U=\r\n");
  EXPECT_NE(basic.find("HTTP/1.1 401"), std::string::npos) << basic;
}

// N9, the review's curl: a server started as the README shows it, scraped by anyone, tells
// nothing about tenants and sessions.
TEST_F(Metrics, AnAnonymousScrapeShowsNoTenantByDefault) {
  StartServer({});
  std::string anonymous = Get(port_);
  ASSERT_NE(anonymous.find("HTTP/1.1 200"), std::string::npos) << anonymous;
  EXPECT_NE(anonymous.find("remora_sessions 1"), std::string::npos) << anonymous;
  EXPECT_EQ(anonymous.find("alice"), std::string::npos) << anonymous;
  EXPECT_EQ(anonymous.find("remora_session_info"), std::string::npos) << anonymous;
}

// N9: an operator may opt in to public details (a monitoring network of its own).
TEST_F(Metrics, PublicDetailsAreAnOperatorsChoice) {
  StartServer({"--metrics-public-details"});
  std::string anonymous = Get(port_);
  EXPECT_NE(anonymous.find("remora_tenant_memory_limit_bytes{tenant=\"alice\""), std::string::npos) << anonymous;
  EXPECT_NE(anonymous.find("remora_session_info{session="), std::string::npos) << anonymous;
}

// N8 on the metrics endpoint: ten addresses keep 16 silent connections each and re-open
// every one that is dropped; a scraper from another address is answered every time, and a
// flooder over its share gets a 503 that says why.
TEST_F(Metrics, SilentPeersCannotStarveTheScraper) {
  StartServer({});
  IdleFlood flood(port_, 2, 10, 16);
  int served = 0, tries = 0;
  std::string failures;
  auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < std::chrono::seconds(7)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
    std::string r = Get(port_);
    tries++;
    if (r.find("HTTP/1.1 200") != std::string::npos && r.find("remora_sessions 1") != std::string::npos) served++;
    else
      failures += r.substr(0, 200) + "\n";
  }
  flood.Stop();
  std::printf("metrics flood: %llu connections opened by 10 addresses; %d of %d scrapes answered\n",
              static_cast<unsigned long long>(flood.opened()), served, tries);
  EXPECT_EQ(served, tries) << failures;
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::vector<Fd> held;
  for (int i = 0; i < 4; i++) held.push_back(ConnectFrom(3, port_));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  std::string refused = Get(port_, "", 3);
  EXPECT_NE(refused.find("HTTP/1.1 503"), std::string::npos) << refused;
  EXPECT_NE(refused.find("4 connections from 127.0.0.3"), std::string::npos) << refused;
}

}  // namespace
}  // namespace remora::security
