// Issue 21: tcp bulk striped over a session's parallel data connections, against a real
// remora-server (host backend) and its workers. Striped copies of random data round-trip byte
// for byte; a data connection cut mid-transfer fails the session cleanly (an error, no hang,
// no wrong byte); a data connection that does not prove it belongs to a session is refused.
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <random>

#include "remora/base/util.h"
#include "remora/protocol/auth.h"
#include "remora/protocol/frame_socket.h"
#include "remora/protocol/handshake.h"
#include "security_support.h"

namespace remora::security {
namespace {

constexpr uint32_t kStreams = 3;

std::vector<std::byte> RandomBytes(size_t n, uint64_t seed) {
  std::vector<std::byte> v(n);
  std::mt19937_64 rng(seed);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t x = rng();
    std::memcpy(v.data() + i, &x, 8);
  }
  for (; i < n; i++) v[i] = static_cast<std::byte>(rng());
  return v;
}

// This process's tcp sockets connected to `port` on loopback, by descriptor, ascending.
std::vector<int> SocketsTo(uint16_t port) {
  std::vector<int> out;
  DIR* d = ::opendir("/proc/self/fd");
  while (struct dirent* e = ::readdir(d)) {
    int fd = std::atoi(e->d_name);
    if (fd <= 2) continue;
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    if (::getpeername(fd, reinterpret_cast<struct sockaddr*>(&ss), &len) != 0 || ss.ss_family != AF_INET) continue;
    if (ntohs(reinterpret_cast<struct sockaddr_in*>(&ss)->sin_port) == port) out.push_back(fd);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

class Stripes : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(s_.Start(1, "", {"--tcp-streams", std::to_string(kStreams)}));
    token_ = s_.CreateTenant("alice");
    port_ = ParseEndpoint(s_.server.Url("tcp"))->port;
  }
  std::unique_ptr<RawSession> Open(int streams = static_cast<int>(kStreams)) {
    ConnectOptions o;
    o.encrypt = EncryptMode::kOff;
    o.data_streams = streams;
    auto s = RawSession::Open(s_.server.Url("tcp"), token_, o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(*s) : nullptr;
  }
  static uint64_t Alloc(RawSession& s, uint64_t n) {
    auto r = s.Call([&](wire::Request::Builder& q) { q.initMemAlloc().setSize(n); });
    EXPECT_TRUE(r.ok() && r->error == Err::kSuccess) << (r.ok() ? r->message : r.status().ToString());
    return r.ok() ? r->Decode([](wire::Reply::Reader x) { return x.getPointer(); }) : 0;
  }
  static Result<RawReply> Up(RawSession& s, uint64_t dev, const std::vector<std::byte>& data) {
    return s.Call([&](wire::Request::Builder& q) {
      auto c = q.initMemcpyHtoD();
      c.setDst(dev);
      c.setSize(data.size());
      c.initStream().setHandle(0);
    }, data);
  }
  static Result<RawReply> Down(RawSession& s, uint64_t dev, uint64_t n) {
    return s.Call([&](wire::Request::Builder& q) {
      auto c = q.initMemcpyDtoH();
      c.setSrc(dev);
      c.setSize(n);
      c.initStream().setHandle(0);
    });
  }

  TenancyServer s_;
  std::string token_;
  uint16_t port_ = 0;
};

TEST_F(Stripes, CopiesRoundTripByteForByte) {
  auto s = Open();
  ASSERT_TRUE(s);
  ASSERT_EQ(s->session().data_streams, kStreams) << "the server granted another count of data connections";
  EXPECT_EQ(SocketsTo(port_).size(), kStreams + 1) << "a control connection and the data connections";
  EXPECT_NE(s->connection().Describe().find("3 data streams"), std::string::npos) << s->connection().Describe();
  const uint64_t kMax = 256ull << 20;
  uint64_t dev = Alloc(*s, kMax);
  ASSERT_NE(dev, 0u);
  // Below, at and around the striping threshold and the chunk size, odd sizes, and 256 MiB.
  const uint64_t sizes[] = {1, 4097, (1 << 20) - 1, 1 << 20, (1 << 20) + 1, (3 << 19) + 7, (5ull << 20) + 12345, kMax};
  uint64_t seed = 1;
  for (uint64_t n : sizes) {
    std::vector<std::byte> data = RandomBytes(n, seed++);
    auto up = Up(*s, dev, data);
    ASSERT_TRUE(up.ok() && up->error == Err::kSuccess) << n << ": " << (up.ok() ? up->message : up.status().ToString());
    auto down = Down(*s, dev, n);
    ASSERT_TRUE(down.ok() && down->error == Err::kSuccess) << n << ": " << (down.ok() ? down->message : down.status().ToString());
    ASSERT_EQ(down->bulk.size(), n);
    EXPECT_TRUE(down->bulk == data) << "the bytes of a " << n << "-byte copy changed on the way";
  }
  // A session that asks for none keeps its bulk on the control connection.
  auto plain = Open(0);
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->session().data_streams, 0u);
  uint64_t dev2 = Alloc(*plain, 3 << 20);
  std::vector<std::byte> data = RandomBytes(3 << 20, 99);
  ASSERT_TRUE(Up(*plain, dev2, data).ok());
  auto down = Down(*plain, dev2, data.size());
  ASSERT_TRUE(down.ok() && down->error == Err::kSuccess);
  EXPECT_TRUE(down->bulk == data);
}

// One data connection is cut while copies run: the session fails with an error (the worker
// ends it), every copy that succeeded before carried the right bytes, and nothing hangs.
TEST_F(Stripes, ALostDataConnectionFailsTheSessionCleanly) {
  for (bool cut_downloads : {false, true}) {
    auto s = Open();
    ASSERT_TRUE(s);
    std::vector<int> socks = SocketsTo(port_);
    ASSERT_EQ(socks.size(), kStreams + 1);
    const uint64_t n = 32 << 20;
    uint64_t dev = Alloc(*s, n);
    std::vector<std::byte> data = RandomBytes(n, 7);
    ASSERT_TRUE(Up(*s, dev, data).ok());
    std::atomic<bool> cut{false};
    std::thread cutter([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(150));
      ::shutdown(socks.back(), SHUT_RDWR);  // the last data connection (opened last)
      cut = true;
    });
    auto start = std::chrono::steady_clock::now();
    Status failed;
    for (int i = 0; i < 400 && failed.ok(); i++) {
      if (cut_downloads) {
        auto down = Down(*s, dev, n);
        if (!down.ok()) failed = down.status();
        else if (down->error != Err::kSuccess) failed = Status(down->error, down->message);
        else ASSERT_TRUE(down->bulk == data) << "a copy returned wrong bytes before the failure";
      } else {
        auto up = Up(*s, dev, data);
        if (!up.ok()) failed = up.status();
        else if (up->error != Err::kSuccess) failed = Status(up->error, up->message);
      }
    }
    cutter.join();
    EXPECT_TRUE(cut);
    ASSERT_FALSE(failed.ok()) << "copies went on after a data connection was cut";
    EXPECT_EQ(failed.code(), Err::kDevicesUnavailable) << failed.ToString();
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
    // The session is over: the next call fails at once, and the worker is gone.
    auto after = s->Call([&](wire::Request::Builder& q) { q.initMemAlloc().setSize(1); }, {}, 0, 5000);
    EXPECT_FALSE(after.ok() && after->error == Err::kSuccess);
    s.reset();
    EXPECT_TRUE(Eventually([&] { return WorkerPids(s_).empty(); }, 10000)) << s_.server.Log();
  }
}

// Data connections that do not prove they belong to a session are refused (and logged); the
// real session goes on.
TEST_F(Stripes, AForgedDataConnectionIsRefused) {
  auto s = Open();
  ASSERT_TRUE(s);
  auto try_join = [&](SessionInfo info, uint32_t index) {
    Fd sock = TcpConnectForTest(port_);
    FrameSocket fs(sock.get());
    return RunDataHello(fs, info, index, 5000);
  };
  SessionInfo forged = s->session();
  for (auto& b : forged.data_key) b ^= 0x5a;
  Status st = try_join(forged, 0);  // the right session, a wrong key
  EXPECT_EQ(st.code(), Err::kNoDevice) << st.ToString();
  EXPECT_NE(st.message().find("refused"), std::string::npos) << st.message();
  st = try_join(s->session(), 0);  // the right key, an index already joined (a replay)
  EXPECT_EQ(st.code(), Err::kNoDevice) << st.ToString();
  st = try_join(s->session(), kStreams);  // beyond the count granted
  EXPECT_EQ(st.code(), Err::kNoDevice) << st.ToString();
  SessionInfo other = s->session();
  other.session_id += 1000;  // no such session
  st = try_join(other, 0);
  EXPECT_EQ(st.code(), Err::kNoDevice) << st.ToString();
  EXPECT_TRUE(Eventually([&] { return s_.server.Log().find("data connection from") != std::string::npos; }, 5000));
  EXPECT_NE(s_.server.Log().find("its proof does not match"), std::string::npos) << s_.server.Log();
  // The session still works, striped.
  uint64_t dev = Alloc(*s, 4 << 20);
  std::vector<std::byte> data = RandomBytes(4 << 20, 3);
  ASSERT_TRUE(Up(*s, dev, data).ok());
  auto down = Down(*s, dev, data.size());
  ASSERT_TRUE(down.ok() && down->error == Err::kSuccess);
  EXPECT_TRUE(down->bulk == data);
}

// A client that completes its handshake and goes (killed) before opening its data
// connections: its worker ends at once, not at the data connections' 15 s deadline.
TEST_F(Stripes, AClientGoneBeforeItsDataConnectionsEndsItsSessionAtOnce) {
  auto token = ParseToken(token_);
  ASSERT_TRUE(token.ok());
  Fd sock = TcpConnectForTest(port_);
  FrameSocket fs(sock.get());
  ClientHandshakeOptions o;
  o.token = *token;
  o.encrypt = EncryptMode::kOff;
  o.data_streams = kStreams;
  auto info = RunClientHandshake(fs, o, {}, 5000);
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  ASSERT_EQ(info->data_streams, kStreams);
  uint64_t start = MonotonicNanos();
  sock.reset();  // gone, with none of its data connections opened
  EXPECT_TRUE(Eventually([&] {
    return s_.server.Log().find("the client closed its connection after opening 0 of its 3 data connections") !=
           std::string::npos;
  }, 5000)) << s_.server.Log();
  EXPECT_LT(MonotonicNanos() - start, uint64_t{5'000'000'000});
  // The server goes on: a session opens and works, striped.
  auto s = Open();
  ASSERT_TRUE(s);
  EXPECT_NE(Alloc(*s, 1 << 20), 0u);
}

// A frame that announces a stripe layout the session cannot carry (more streams than were
// granted) ends that session: the worker exits, the server goes on.
TEST_F(Stripes, ABadStripeWordEndsOnlyThatSession) {
  auto s = Open();
  ASSERT_TRUE(s);
  std::vector<int> socks = SocketsTo(port_);
  ASSERT_EQ(socks.size(), kStreams + 1);
  FrameHeader h;
  h.kind = static_cast<uint16_t>(FrameKind::kRequest);
  h.flags = kFlagExpectsReply;
  h.tag = 999;
  h.bulk_bytes = 4 << 20;
  h.body_words = 1;
  h.reserved = (kStreams + 2) | (19u << 8);  // 5 streams of a session that has 3
  uint64_t frame[5] = {};
  std::memcpy(frame, &h, sizeof(h));
  ASSERT_EQ(::send(socks.front(), frame, sizeof(frame), MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(frame)));
  EXPECT_TRUE(Eventually([&] { return WorkerPids(s_).empty(); }, 10000)) << s_.server.Log();
  EXPECT_TRUE(Eventually([&] { return s_.server.Log().find("announced bulk striped over 5") != std::string::npos; }, 5000))
      << s_.server.Log();
  auto after = s->Call([&](wire::Request::Builder& q) { q.initMemAlloc().setSize(1); }, {}, 0, 5000);
  EXPECT_FALSE(after.ok() && after->error == Err::kSuccess);
  auto fresh = Open();  // the server still serves
  ASSERT_TRUE(fresh);
  EXPECT_NE(Alloc(*fresh, 1 << 20), 0u);
}

}  // namespace
}  // namespace remora::security
