// F3, F4 and issue 16's flood resistance (docs/SECURITY.md): unauthenticated peers - slow,
// idle, descriptor-flooding or oversized - against a real remora-server; legitimate
// clients keep getting served, quickly, on every transport, and the admin API survives.
#include <arpa/inet.h>
#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <chrono>
#include <deque>
#include <future>

#include "admin.capnp.h"
#include "common/admin_channel.h"
#include "security_support.h"

namespace remora::security {
namespace {

using Clock = std::chrono::steady_clock;

int ConnectShm(const std::string& url) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un u = {};
  u.sun_family = AF_UNIX;
  std::strncpy(u.sun_path, url.substr(6).c_str(), sizeof(u.sun_path) - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&u), sizeof(u)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

int ConnectTcp(const std::string& url) {
  auto ep = ParseEndpoint(url);
  Fd fd = TcpConnectForTest(ep->port);
  return fd.release();
}

// True once the server has closed `fd` (after what it sent, read returns 0 or an error).
bool Closed(int fd) {
  char buf[4096];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) continue;
    return n == 0 || errno != EAGAIN;
  }
}

void RaiseOwnDescriptorLimit() {
  struct rlimit rl;
  ::getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = rl.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &rl);
}

// CPU seconds the process has used (user + system).
double CpuSeconds(pid_t pid) {
  std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  size_t close = stat.rfind(')');
  std::istringstream in(stat.substr(close + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && in >> field; i++)
    if (i == 14 || i == 15) ticks += std::stod(field);
  return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

int OpenDescriptors(pid_t pid) {
  int n = 0;
  DIR* d = ::opendir(("/proc/" + std::to_string(pid) + "/fd").c_str());
  if (d == nullptr) return -1;
  while (struct dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
  ::closedir(d);
  return n;
}

// Runs app_roundtrip (small copies) against `url`; its wall time in seconds, or -1 if it
// failed (the output is then added to `failures`).
double TimedRoundTrip(const std::string& url, const std::map<std::string, std::string>& env, std::string* failures) {
  auto e = testing::ShimEnv(url);
  for (auto& [k, v] : env) e[k] = v;
  auto t0 = Clock::now();
  RunResult r = testing::Run({BinDir() + "/app_roundtrip", "--max-bytes", "65536"}, e, 60);
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  if (r.exit_code != 0) {
    *failures += r.output;
    return -1;
  }
  return secs;
}

class PeerFlood : public ::testing::Test {
 protected:
  void SetUp() override { RaiseOwnDescriptorLimit(); }
  bool Start(std::vector<std::string> launcher = {}, std::vector<std::string> extra = {}) {
    ServerOptions o;
    o.launcher = std::move(launcher);
    o.extra_args = std::move(extra);
    if (!s_.Start(o)) return false;
    token_ = s_.CreateTenant("alice");
    return !token_.empty();
  }
  std::map<std::string, std::string> Env() { return {{"REMORA_TOKEN", token_}}; }
  TenancyServer s_;
  std::string token_;
};

// The review's slowloris: one header byte every few seconds on 64 TCP and 16 shm sockets
// used to hold every handshake slot (the timeout restarted with each byte). Now each gets
// one absolute deadline (5 s; the Hello within half of it) and clients are served meanwhile.
TEST_F(PeerFlood, SlowPeersAreCutOffAndStarveNobody) {
  ASSERT_TRUE(Start());
  std::vector<int> slow;
  for (int i = 0; i < 64; i++) slow.push_back(ConnectTcp(s_.server.Url("tcp")));
  for (int i = 0; i < 16; i++) slow.push_back(ConnectShm(s_.server.Url("shm")));
  auto start = Clock::now();
  std::atomic<bool> stop{false};
  std::thread drip([&] {
    const char header[] = "RMR1";
    for (int byte = 0; !stop && byte < 4; byte++) {
      for (int fd : slow) (void)::send(fd, header + byte, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      for (int i = 0; i < 10 && !stop; i++) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  std::string failures;
  double shm = TimedRoundTrip(s_.server.Url("shm"), Env(), &failures);
  double tcp = TimedRoundTrip(s_.server.Url("tcp"), Env(), &failures);
  EXPECT_GE(shm, 0) << failures;
  EXPECT_GE(tcp, 0) << failures;
  EXPECT_LT(shm, 5.0);
  EXPECT_LT(tcp, 5.0);
  bool all_closed = Eventually([&] { return std::all_of(slow.begin(), slow.end(), Closed); }, 8000);
  double took = std::chrono::duration<double>(Clock::now() - start).count();
  stop = true;
  drip.join();
  EXPECT_TRUE(all_closed) << "slow handshakes are still open after " << took << " s";
  EXPECT_LT(took, 7.5);
  for (int fd : slow) ::close(fd);
  EXPECT_TRUE(s_.server.Alive());
}

// The review's descriptor flood: Hello fragments carrying 8 descriptors each, from the shm
// socket, until the supervisor ran out of descriptors and spun on EMFILE, logging ~100,000
// lines a second. Now one descriptor is taken, only with a connection's first bytes; a peer
// has a budget of handshakes; EMFILE drops a connection through a spare descriptor, with a
// rate-limited warning. Here under a 256-descriptor limit.
TEST_F(PeerFlood, DescriptorFloodsAreBounded) {
  ASSERT_TRUE(Start({"prlimit", "--nofile=256:256", "--"}));
  pid_t server = s_.server.pid();
  size_t log_before = s_.server.Log().size();
  std::vector<int> devnull;
  for (int i = 0; i < 8; i++) devnull.push_back(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  std::vector<int> attackers;
  for (int i = 0; i < 140; i++) {
    int fd = ConnectShm(s_.server.Url("shm"));
    if (fd < 0) continue;
    char byte = 'R';
    struct iovec iov = {&byte, 1};
    alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * 8)] = {};
    struct msghdr msg = {};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * 8);
    std::memcpy(CMSG_DATA(c), devnull.data(), sizeof(int) * 8);
    (void)::sendmsg(fd, &msg, MSG_NOSIGNAL);
    attackers.push_back(fd);
  }
  // And more idle TCP connections than the server has descriptors.
  for (int i = 0; i < 300; i++) attackers.push_back(ConnectTcp(s_.server.Url("tcp")));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  double cpu0 = CpuSeconds(server);
  std::this_thread::sleep_for(std::chrono::seconds(2));
  double cpu = CpuSeconds(server) - cpu0;
  int fds = OpenDescriptors(server);
  std::printf("descriptor flood: supervisor used %.2f s of CPU in 2 s, holds %d descriptors (limit 256)\n", cpu, fds);
  EXPECT_LT(cpu, 0.6) << "the supervisor is spinning";
  EXPECT_LT(fds, 256);
  std::string failures;
  double shm = TimedRoundTrip(s_.server.Url("shm"), Env(), &failures);
  EXPECT_GE(shm, 0) << failures;
  EXPECT_LT(shm, 5.0);
  size_t grew = s_.server.Log().size() - log_before;
  EXPECT_LT(grew, 64u << 10) << "the log grew by " << grew << " bytes";
  for (int fd : attackers) ::close(fd);
  for (int fd : devnull) ::close(fd);
  double tcp = TimedRoundTrip(s_.server.Url("tcp"), Env(), &failures);
  EXPECT_GE(tcp, 0) << failures;
  EXPECT_TRUE(s_.server.Alive());
}

// A Hello that announces 8 MiB (or carries a 4 MiB tenant name) is refused at its header:
// nothing that size is allocated or logged.
TEST_F(PeerFlood, OversizedHellosAreRefusedAtTheHeader) {
  ASSERT_TRUE(Start());
  size_t log_before = s_.server.Log().size();
  for (int i = 0; i < 10; i++) {
    int fd = ConnectTcp(s_.server.Url("tcp"));
    FrameHeader h;
    h.kind = static_cast<uint16_t>(FrameKind::kHandshake);
    h.body_words = kMaxBodyWords;
    std::string junk(1 << 20, 'a');
    (void)::send(fd, &h, sizeof(h), MSG_NOSIGNAL);
    (void)::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
    EXPECT_TRUE(Eventually([&] { return Closed(fd); }, 3000));
    ::close(fd);
  }
  size_t grew = s_.server.Log().size() - log_before;
  EXPECT_LT(grew, 8u << 10) << "the log grew by " << grew << " bytes";
  EXPECT_NE(s_.server.Log().find("handshake message of"), std::string::npos);
}

// Issue 16: 1,000 idle TCP connections are held open (re-opened when the server closes them)
// while 20 clients over shm and 20 over tcp each complete a round trip in under 5 s.
TEST_F(PeerFlood, AThousandIdleConnectionsStarveNobody) {
  ASSERT_TRUE(Start());
  std::atomic<bool> stop{false};
  std::atomic<int> held{0}, reopened{0};
  std::thread holder([&] {
    std::deque<int> idle;
    while (!stop) {
      while (idle.size() < 1000 && !stop) {
        int fd = ConnectTcp(s_.server.Url("tcp"));
        if (fd < 0) break;
        idle.push_back(fd);
      }
      held = static_cast<int>(idle.size());
      for (auto it = idle.begin(); it != idle.end();) {
        if (Closed(*it)) {
          ::close(*it);
          it = idle.erase(it);
          reopened++;
        } else {
          ++it;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
    for (int fd : idle) ::close(fd);
  });
  ASSERT_TRUE(Eventually([&] { return held.load() >= 1000; }, 20000)) << held.load();
  std::vector<std::future<double>> clients;
  std::vector<std::string> failures(40);
  for (int i = 0; i < 40; i++) {
    std::string url = s_.server.Url(i % 2 == 0 ? "shm" : "tcp");
    clients.push_back(std::async(std::launch::async, [&, url, i] { return TimedRoundTrip(url, Env(), &failures[i]); }));
  }
  // What CI checks is that every client is served: a starved one is refused or waits for a
  // handshake slot forever. The 5 s per round trip is measured and printed, and
  // asserted only as a generous 30 s, so a loaded 2-core CI machine does not make it flaky.
  double slowest[2] = {0, 0};
  int under5[2] = {0, 0};
  for (int i = 0; i < 40; i++) {
    double t = clients[i].get();
    EXPECT_GE(t, 0) << (i % 2 == 0 ? "shm" : "tcp") << " client " << i << ": " << failures[i];
    EXPECT_LT(t, 30.0) << (i % 2 == 0 ? "shm" : "tcp") << " client " << i;
    slowest[i % 2] = std::max(slowest[i % 2], t);
    under5[i % 2] += t >= 0 && t < 5.0;
  }
  stop = true;
  holder.join();
  std::printf("20 shm + 20 tcp clients under a flood of 1,000 idle connections: shm %d/20 done in under 5 s (slowest "
              "%.2f s), tcp %d/20 (slowest %.2f s); %d idle connections reopened\n",
              under5[0], slowest[0], under5[1], slowest[1], reopened.load());
  EXPECT_TRUE(s_.server.Alive());
}

// ---- the admin API (F3) --------------------------------------------------------------

class AdminFlood : public PeerFlood {
 protected:
  bool StartAdmin() {
    token_file_ = s_.server.dir() + "/admin.token";
    return Start({"prlimit", "--nofile=256:256", "--"},
                 {"--admin-listen", "tcp://127.0.0.1:0", "--admin-token-file", token_file_});
  }
  std::string AdminUrl() {
    std::string log = s_.server.Log();
    size_t at = log.find(" and tcp://");
    EXPECT_NE(at, std::string::npos) << log;
    size_t end = log.find(' ', at + 5);
    return log.substr(at + 5, end - at - 5);
  }
  std::string token_file_;
};

// The review's attacks: 1,100 idle admin connections took the admin API down for good
// (EMFILE ended its accept loop), and 200,000 challenge() calls kept 160 MB of provers.
// Now the unix socket serves at most 16 connections and TCP a per-peer share (4 not logged
// in per address, 32 in all: these all come from 127.0.0.1), one challenge each (inside
// the sealed channel), with a 10 s login deadline, and accept errors are retried: after the
// flood the API answers on both sockets.
TEST_F(AdminFlood, TheAdminApiSurvivesFloods) {
  ASSERT_TRUE(StartAdmin());
  std::string url = AdminUrl();
  auto ep = ParseEndpoint(url);
  ASSERT_TRUE(ep.ok()) << url;
  std::vector<int> idle;
  for (int i = 0; i < 400; i++) idle.push_back(TcpConnectForTest(ep->port).release());
  std::this_thread::sleep_for(std::chrono::seconds(1));
  uint64_t rss_before = std::stoull(ProcStatus(s_.server.pid(), "VmRSS:"));
  for (int fd : idle)
    if (fd >= 0) ::close(fd);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the server sees them go
  // Challenges: many connections, each asking once and never proving; and a second
  // challenge on one connection.
  std::string second;
  {
    auto io = kj::setupAsyncIo();
    std::vector<kj::Own<kj::AsyncIoStream>> streams;
    std::vector<kj::Own<capnp::TwoPartyClient>> clients;
    int answered = 0;
    for (int i = 0; i < 200; i++) {
      Fd raw = TcpConnectForTest(ep->port);
      if (!raw) continue;
      auto keys = admin::ClientKeyExchange(raw.get(), 2000);  // refused past this address's share
      if (!keys.ok()) continue;
      streams.push_back(admin::SealStream(
          io.lowLevelProvider->wrapSocketFd(raw.release(), kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP), *keys, false));
      clients.push_back(kj::heap<capnp::TwoPartyClient>(*streams.back()));
      auto login = clients.back()->bootstrap().castAs<admin::rpc::AdminLogin>();
      Nonce cn = RandomNonce();
      auto req = login.challengeRequest();
      req.setClientNonce(capnp::Data::Reader(cn.data(), cn.size()));
      auto p = io.provider->getTimer().timeoutAfter(2 * kj::SECONDS, req.send());
      try {
        p.wait(io.waitScope);
        answered++;
        if (i == 0) {
          auto again = login.challengeRequest();
          again.setClientNonce(capnp::Data::Reader(cn.data(), cn.size()));
          try {
            again.send().wait(io.waitScope);
            second = "answered";
          } catch (const kj::Exception& e) {
            second = e.getDescription().cStr();
          }
        }
      } catch (const kj::Exception&) {
      }
    }
    EXPECT_LE(answered, 4 + 2) << "more challenges were held at once than one address's share";
    EXPECT_NE(second.find("one admin challenge per connection"), std::string::npos) << second;
    uint64_t rss = std::stoull(ProcStatus(s_.server.pid(), "VmRSS:"));
    std::printf("admin: %d of 200 challenges answered at once; supervisor RSS %llu -> %llu kB\n", answered,
                static_cast<unsigned long long>(rss_before), static_cast<unsigned long long>(rss));
    EXPECT_LT(rss, rss_before + 20 * 1024) << "supervisor RSS grew from " << rss_before << " kB to " << rss << " kB";
  }
  // The API is alive on both sockets.
  EXPECT_TRUE(Eventually([&] { return s_.Ctl({"tenant", "list"}).exit_code == 0; }, 15000)) << s_.server.Log();
  RunResult tcp = testing::Run({BinDir() + "/remoractl", "--admin", url, "--admin-token-file", token_file_, "tenant", "list"});
  EXPECT_EQ(tcp.exit_code, 0) << tcp.output;
  EXPECT_EQ(s_.server.Log().find("admin API stopped"), std::string::npos);
}

}  // namespace
}  // namespace remora::security
