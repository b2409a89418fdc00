// N7, N8 (docs/SECURITY.md, "The admin API over TCP is sealed and shared per peer"): the
// review read new tenant tokens off the admin TCP API with a relay, and locked every
// administrator out with 16 idle connections. Real server, real remoractl, real sockets.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>

#include <atomic>

#include <kj/async-io.h>

#include "common/admin_channel.h"
#include "idle_flood.h"
#include "relay.h"
#include "security_support.h"

namespace remora::security {
namespace {

// The token's secret part (after the last '.').
std::string SecretOf(const std::string& token) { return token.substr(token.rfind('.') + 1); }

class AdminTcp : public ::testing::Test {
 protected:
  void SetUp() override {
    token_file_ = s_.server.dir() + "/admin.token";
    ServerOptions o;
    o.extra_args = {"--admin-listen", "tcp://127.0.0.1:0", "--admin-token-file", token_file_};
    ASSERT_TRUE(s_.Start(o));
    std::string log = s_.server.Log();
    size_t at = log.find(" and tcp://");
    ASSERT_NE(at, std::string::npos) << log;
    auto ep = ParseEndpoint(log.substr(at + 5, log.find(' ', at + 5) - at - 5));
    ASSERT_TRUE(ep.ok()) << log;
    port_ = ep->port;
  }
  std::string Url() const { return "tcp://127.0.0.1:" + std::to_string(port_); }
  // remoractl --admin URL --admin-token-file ... ARGS
  RunResult CtlTcp(const std::string& url, const std::vector<std::string>& args) {
    std::vector<std::string> argv = {BinDir() + "/remoractl", "--admin", url, "--admin-token-file", token_file_};
    argv.insert(argv.end(), args.begin(), args.end());
    return testing::Run(argv, {}, 60);
  }
  bool HasTenant(const std::string& name) {
    RunResult r = s_.Ctl({"--json", "tenant", "list"});
    return r.output.find("\"" + name + "\"") != std::string::npos;
  }

  TenancyServer s_;
  std::string token_file_;
  uint16_t port_ = 0;
};

// N7. The review's relay printed "seen on the wire: remora1.carol.<secret>". Now every
// byte after the key exchange is sealed: a relay sees neither the new tenant's token, nor a
// migration's token, nor the admin token, nor even the tenant's name, and the commands
// still work through it.
TEST_F(AdminTcp, ARelaySeesNoTokenOnTheWire) {
  std::string admin_secret = SecretOf(ReadFile(token_file_).substr(0, ReadFile(token_file_).find('\n')));
  std::string dave = s_.CreateTenant("dave");
  std::string dave_file = s_.server.dir() + "/dave.token";
  std::ofstream(dave_file) << dave << "\n";
  Relay relay("127.0.0.1", port_);
  RunResult create = CtlTcp(relay.Url(), {"--json", "tenant", "create", "carol"});
  ASSERT_EQ(create.exit_code, 0) << create.output;
  std::string carol = JsonField(create.output, "token");
  ASSERT_EQ(carol.rfind("remora1.carol.", 0), 0u) << create.output;
  // A migration's token travels in the request: through the relay, to the server, which
  // answers (there is no session 999).
  RunResult migrate = CtlTcp(relay.Url(), {"session", "migrate", "999", "--to", "tcp://127.0.0.1:1", "--token-file",
                                           dave_file, "--wait", "0"});
  EXPECT_NE(migrate.exit_code, 0);
  EXPECT_NE(migrate.output.find("no session 999"), std::string::npos) << migrate.output;
  std::string wire = relay.ClientToServer() + relay.ServerToClient();
  ASSERT_GT(wire.size(), 200u) << "nothing went through the relay";
  EXPECT_EQ(wire.find(SecretOf(carol)), std::string::npos) << "the new tenant's token crossed the wire in clear";
  EXPECT_EQ(wire.find("remora1."), std::string::npos) << "a token crossed the wire in clear";
  EXPECT_EQ(wire.find(SecretOf(dave)), std::string::npos) << "the migration's token crossed the wire in clear";
  EXPECT_EQ(wire.find(admin_secret), std::string::npos);
  EXPECT_EQ(wire.find("carol"), std::string::npos) << "the requests are not sealed (a tenant name is readable)";
  EXPECT_EQ(wire.find("no session"), std::string::npos) << "the answers are not sealed";
}

// N7, integrity. The review noted that an on-path peer could take over the logged-in admin
// connection. A bit flipped either way, or a record sent twice, now breaks the channel
// before anything it carried is acted on: the command fails and changes nothing.
TEST_F(AdminTcp, ARelayCannotAlterOrReplayTheSession) {
  const uint64_t at = admin::kChannelHelloBytes + 6;  // inside the first sealed record
  auto flip = [at](bool want_to_server) {
    return [at, want_to_server](bool to_server, uint64_t offset, std::string& chunk) {
      if (to_server == want_to_server && offset <= at && at < offset + chunk.size()) chunk[at - offset] ^= 0x01;
    };
  };
  for (bool to_server : {true, false}) {
    Relay relay("127.0.0.1", port_, nullptr, flip(to_server));
    RunResult r = CtlTcp(relay.Url(), {"tenant", "create", "erin"});
    EXPECT_NE(r.exit_code, 0) << (to_server ? "client->server: " : "server->client: ") << r.output;
    EXPECT_NE(r.output.find("remoractl:"), std::string::npos) << r.output;
    EXPECT_FALSE(HasTenant("erin")) << "an altered request was carried out";
  }
  // Every record from the client sent twice: the repeat is refused, the channel ends.
  Relay replay("127.0.0.1", port_, nullptr, [](bool to_server, uint64_t offset, std::string& chunk) {
    if (to_server && offset >= admin::kChannelHelloBytes) chunk += chunk;
  });
  RunResult r = CtlTcp(replay.Url(), {"tenant", "create", "frank"});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_FALSE(HasTenant("frank"));
  EXPECT_NE(s_.server.Log().find("does not open"), std::string::npos) << s_.server.Log();
  // The real thing still works, and the server is unharmed.
  RunResult ok = CtlTcp(Url(), {"tenant", "create", "grace"});
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_TRUE(HasTenant("grace"));
}

// N7, a man in the middle that holds a key exchange with each side and forwards what it
// opens: it reads the login, but the client's proof covers the client's channel, so the
// server refuses it; nothing is administered and no token is handed out.
TEST_F(AdminTcp, AManInTheMiddleCannotLogIn) {
  Fd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  struct sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(listener.get(), 4), 0);
  socklen_t len = sizeof(a);
  ::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&a), &len);
  uint16_t mitm_port = ntohs(a.sin_port);
  std::atomic<bool> relayed{false};
  std::thread mitm([&] {
    int c = ::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) return;
    try {
      auto io = kj::setupAsyncIo();
      auto client = io.lowLevelProvider->wrapSocketFd(c, kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP);
      admin::ChannelKeys with_client;
      admin::ServerKeyExchange(*client, with_client).wait(io.waitScope);
      Fd up = TcpConnectForTest(port_);
      auto with_server = admin::ClientKeyExchange(up.get(), 5000);
      if (!with_server.ok()) return;
      auto server = io.lowLevelProvider->wrapSocketFd(up.release(), kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP);
      auto c_side = admin::SealStream(kj::mv(client), with_client, /*server_side=*/true);
      auto s_side = admin::SealStream(kj::mv(server), *with_server, /*server_side=*/false);
      relayed = true;
      auto both = c_side->pumpTo(*s_side).ignoreResult().exclusiveJoin(s_side->pumpTo(*c_side).ignoreResult());
      io.provider->getTimer().timeoutAfter(20 * kj::SECONDS, kj::mv(both)).wait(io.waitScope);
    } catch (const kj::Exception&) {
    }
  });
  RunResult r = CtlTcp("tcp://127.0.0.1:" + std::to_string(mitm_port), {"--json", "tenant", "create", "heidi"});
  mitm.join();
  EXPECT_TRUE(relayed.load()) << "the man in the middle did not get both channels up";
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("wrong admin token"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("remora1."), std::string::npos) << r.output;
  EXPECT_FALSE(HasTenant("heidi")) << "the man in the middle administered the server";
  EXPECT_NE(s_.server.Log().find("admin login over TCP refused"), std::string::npos);
}

// N8. The review's 16 idle connections, re-opened whenever the login deadline dropped them,
// made every remoractl fail ("only root or the server's own user may administer it over its
// socket"). Now ten flooding addresses each keep 16 idle connections open and re-open every
// one that is closed for 12 s (past the 10 s deadline); an administrator from another address
// is served every time, and a flooder's extra connection is told why it was refused.
TEST_F(AdminTcp, IdlePeersCannotLockOutAnAdministrator) {
  IdleFlood flood(port_, 2, 10, 16);
  int served = 0, tries = 0;
  std::string failures;
  auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < std::chrono::seconds(12)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    RunResult r = CtlTcp(Url(), {"tenant", "list"});
    tries++;
    if (r.exit_code == 0) served++;
    else failures += r.output;
  }
  flood.Stop();
  std::printf("admin flood: %llu connections opened by 10 addresses, %llu closed by the server; %d of %d administrator "
              "commands served\n",
              static_cast<unsigned long long>(flood.opened()), static_cast<unsigned long long>(flood.closed_by_server()),
              served, tries);
  EXPECT_EQ(served, tries) << failures;
  EXPECT_GE(flood.opened(), 160u);
  // One address holding its share: its next connection is refused, and told why.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the server sees the flood go
  std::vector<Fd> held;
  for (int i = 0; i < 4; i++) held.push_back(ConnectFrom(2, port_));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  Fd extra = ConnectFrom(2, port_);
  ASSERT_TRUE(extra);
  auto refused = admin::ClientKeyExchange(extra.get(), 5000);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("4 connections from 127.0.0.2 have not logged in yet"), std::string::npos)
      << refused.status().message();
  EXPECT_EQ(refused.status().message().find("only root"), std::string::npos) << refused.status().message();
  EXPECT_EQ(CtlTcp(Url(), {"tenant", "list"}).exit_code, 0);
  EXPECT_EQ(s_.server.Log().find("admin API stopped"), std::string::npos);
}

}  // namespace
}  // namespace remora::security
