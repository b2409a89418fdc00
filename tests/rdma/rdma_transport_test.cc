// End-to-end tests of the RDMA Connection at the protocol level. Both sides run in this
// program (the executor in an in-process server, or in a child process when a side must die),
// over a real RDMA device: run it inside the Soft-RoCE VM (tests/rdma/vm-run.sh; ctest -L rdma).
// The device's address comes from REMORA_VM_RDMA_ADDR (set by vm-run.sh) or REMORA_RDMA_ADDR.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <thread>

#include "rdma/connections.h"
#include "rdma/verbs_api.h"
#include "rdma/verbs_objects.h"
#include "rdma/wire.h"
#include "rdma_test_util.h"
#include "remora/base/util.h"
#include "remora/protocol/frame_socket.h"
#include "remora/protocol/handshake.h"
#include "tcp/tcp_connection.h"
#include "transport_internal.h"

extern char** environ;

namespace remora::rdmatest {
namespace {

constexpr size_t kMiB = 1 << 20;

std::string RdmaAddress() {
  for (const char* var : {"REMORA_RDMA_ADDR", "REMORA_VM_RDMA_ADDR"})
    if (const char* v = std::getenv(var); v != nullptr && *v != '\0') return v;
  return "";
}

// Skips (outside the VM) or fails (inside it) when there is no RDMA to test on.
#define REQUIRE_RDMA()                                                                                   \
  do {                                                                                                   \
    std::string why = RdmaUnavailableReason();                                                           \
    if (RdmaAddress().empty()) why = "REMORA_RDMA_ADDR is not set";                                      \
    if (!why.empty()) {                                                                                  \
      if (std::getenv("REMORA_VM") != nullptr) FAIL() << "no RDMA inside the test VM: " << why;          \
      GTEST_SKIP() << "no RDMA here (" << why << "); run through tests/rdma/vm-run.sh or ctest -L rdma"; \
    }                                                                                                    \
  } while (0)

Result<std::unique_ptr<Connection>> ConnectTo(const std::string& url, int timeout_ms = 15000) {
  ASSIGN_OR_RETURN(Endpoint ep, ParseEndpoint(url));
  ConnectOptions o;
  o.timeout_ms = timeout_ms;
  ASSIGN_OR_RETURN(Connected c, Connect(ep, o));
  return std::move(c.connection);
}

std::vector<std::byte> RandomBytes(size_t n, uint64_t seed) {
  std::vector<std::byte> v(n);
  FillRandom(v, seed);
  return v;
}

double Seconds(uint64_t since_ns) { return double(MonotonicNanos() - since_ns) / 1e9; }

pid_t SpawnSelf(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  std::string self = "/proc/self/exe";
  argv.push_back(self.data());
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), environ) != 0) return -1;
  return pid;
}

int Reap(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

class RdmaTransport : public ::testing::Test {
 protected:
  void SetUp() override {
    REQUIRE_RDMA();
    server_ = std::make_unique<TestServer>(RdmaAddress());
    ASSERT_TRUE(server_->status().ok()) << server_->status().ToString();
    auto c = ConnectTo(server_->url());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    conn_ = std::move(c).value();
  }
  void TearDown() override {
    conn_.reset();
    server_.reset();
  }

  // H2D then D2H of `data` (from / into the given memory), compared byte for byte.
  void RoundTrip(ConstBytes data, MutableBytes back) {
    SCOPED_TRACE(fmt::format("{} bytes", data.size()));
    uint64_t t0 = MonotonicNanos();
    auto stored = Call(*conn_, ++tag_, Body(kStore), data);
    ASSERT_TRUE(stored.ok()) << stored.status().ToString();
    EXPECT_EQ(stored->body.at(1), Hash(data));
    EXPECT_EQ(stored->body.at(2), data.size());
    double h2d = Seconds(t0);
    std::memset(back.data(), 0xee, back.size());
    t0 = MonotonicNanos();
    auto fetched = Call(*conn_, ++tag_, Body(kFetch, data.size()), {}, back.first(data.size()));
    ASSERT_TRUE(fetched.ok()) << fetched.status().ToString();
    double d2h = Seconds(t0);
    EXPECT_EQ(fetched->header.bulk_bytes, data.size());
    EXPECT_EQ(fetched->body.at(1), Hash(data));
    ASSERT_EQ(std::memcmp(back.data(), data.data(), data.size()), 0) << "D2H data differs";
    if (data.size() >= kMiB)
      std::printf("    %zu bytes: H2D %.3f s, D2H %.3f s (Soft-RoCE under TCG: functional figures only)\n", data.size(), h2d, d2h);
  }

  std::unique_ptr<TestServer> server_;
  std::unique_ptr<Connection> conn_;
  uint64_t tag_ = 0;
};

TEST_F(RdmaTransport, DeclaresItsCapabilities) {
  const Capabilities& caps = conn_->capabilities();
  EXPECT_STREQ(caps.transport, "rdma");
  EXPECT_FALSE(caps.shared_memory);
  EXPECT_FALSE(caps.passes_fds);
  EXPECT_TRUE(caps.one_sided);
  EXPECT_TRUE(caps.registered_memory);
  EXPECT_EQ(caps.inline_bulk_limit, rdma::kInlineBulkLimit);
  EXPECT_EQ(conn_->Describe().rfind("rdma ", 0), 0u) << conn_->Describe();
  EXPECT_TRUE(conn_->SharedRegions().empty());
  // Executor calls on the requester side are refused, not undefined.
  EXPECT_EQ(conn_->Poll().status().code(), Err::kNotSupported);
}

TEST_F(RdmaTransport, FramesRoundTrip) {
  // Up to a 1.6 MB body: one message, several, and a record reassembled from ~100 fragments.
  for (size_t words : {3, 100, 2040, 2050, 20000, 200000}) {
    std::vector<uint64_t> body(words);
    for (size_t i = 0; i < words; i++) body[i] = i * 0x9e3779b97f4a7c15ull;
    body[0] = kEcho;
    auto r = Call(*conn_, ++tag_, body);
    ASSERT_TRUE(r.ok()) << words << " words: " << r.status().ToString();
    EXPECT_EQ(r->header.kind, static_cast<uint16_t>(FrameKind::kReply));
    EXPECT_EQ(r->header.tag, tag_);
    EXPECT_EQ(r->header.bulk_bytes, 0u);
    EXPECT_EQ(r->body, body) << words << " words";
  }
  // Round-trip time of a small call (functional figure: Soft-RoCE under TCG).
  const int kCalls = 200;
  uint64_t t0 = MonotonicNanos();
  for (int i = 0; i < kCalls; i++) ASSERT_TRUE(Call(*conn_, ++tag_, Body(kEcho)).ok());
  std::printf("    small call round trip: %.1f us\n", Seconds(t0) * 1e6 / kCalls);
}

TEST_F(RdmaTransport, PageableBulkRoundTrips) {
  // Inline (1 B, 4 KiB, 8 KiB), one staging segment (8 KiB + 1, 1 MiB), a partial last
  // segment (1 MiB + 3) and 64 staging segments / a 64 MiB staged reply.
  std::vector<std::byte> back(64 * kMiB);
  for (size_t n : {size_t{1}, size_t{4096}, size_t{8192}, size_t{8193}, kMiB, kMiB + 3, 64 * kMiB}) {
    std::vector<std::byte> data = RandomBytes(n, n);
    RoundTrip(data, back);
    if (HasFatalFailure()) return;
  }
  rdma::RequesterStats s = rdma::GetRequesterStats(*conn_);
  EXPECT_EQ(s.direct_sources, 0u);
  EXPECT_EQ(s.staged_segments, 2u + 2u + 64u);  // 8193, 1 MiB, 1 MiB + 3 (2), 64 MiB
  EXPECT_EQ(s.staged_replies, 4u);
  EXPECT_EQ(s.embedded_replies, 0u);
  std::printf("    requester: %s\n", s.channel.c_str());
}

TEST_F(RdmaTransport, ASlowReplyWrittenByRdmaShowsProgress) {
  // The executor RDMA-writes a 4 MiB reply's bulk one 1 MiB chunk every 600 ms: nothing of
  // it reaches the requester's receive path until the reply's record, after the last write.
  // Its keepalives must move ReceiveProgress meanwhile, or the shim's watchdog would give a
  // live server up during a long device-to-host copy (as it did over Soft-RoCE on a loaded
  // machine: REMORA_DEADLINE_S passed inside one 64 MiB copy).
  const size_t n = 4 * kMiB;
  std::vector<std::byte> data = RandomBytes(n, 7), back(n);
  ASSERT_TRUE(Call(*conn_, ++tag_, Body(kStore), data).ok());
  std::atomic<bool> done{false};
  std::vector<uint64_t> seen;  // ReceiveProgress while the call runs, every 100 ms
  std::thread watch([&] {
    while (!done) {
      seen.push_back(conn_->ReceiveProgress());
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  auto fetched = Call(*conn_, ++tag_, Body(kSlowFetch, n, 600), {}, back);
  done = true;
  watch.join();
  ASSERT_TRUE(fetched.ok()) << fetched.status().ToString();
  EXPECT_EQ(fetched->body.at(1), Hash(data));
  EXPECT_EQ(std::memcmp(back.data(), data.data(), n), 0);
  // The reply takes at least 2.4 s; a keepalive goes every 250 ms of it. (Counted loosely:
  // a loaded machine may stall either side for a while.)
  size_t moves = 0;
  for (size_t i = 1; i < seen.size(); i++) moves += seen[i] != seen[i - 1];
  EXPECT_GE(moves, 3u) << "ReceiveProgress moved " << moves << " times in " << seen.size() * 100 << " ms of a slow reply";
}

TEST_F(RdmaTransport, RegisteredMemoryMovesWithoutStagingOrReRegistration) {
  const size_t n = 64 * kMiB;
  auto* src = static_cast<std::byte*>(std::aligned_alloc(4096, n + kMiB));
  auto* dst = static_cast<std::byte*>(std::aligned_alloc(4096, n + kMiB));
  ASSERT_TRUE(src != nullptr && dst != nullptr);
  FillRandom({src, n + kMiB}, 7);
  ASSERT_TRUE(rdma::RdmaRegisterHostMemory(*conn_, src, n + kMiB).ok());
  ASSERT_TRUE(rdma::RdmaRegisterHostMemory(*conn_, dst, n + kMiB).ok());
  EXPECT_EQ(rdma::RdmaRegisterHostMemory(*conn_, src + 4096, 10).code(), Err::kHostMemoryAlreadyRegistered);

  // Sub-ranges of the registered buffers, several times over.
  for (int round = 0; round < 2; round++) {
    RoundTrip({src + 100, kMiB}, {dst + 3, kMiB});
    RoundTrip({src, n}, {dst, n});
    if (HasFatalFailure()) break;
  }
  rdma::RequesterStats s = rdma::GetRequesterStats(*conn_);
  EXPECT_EQ(s.registrations, 2u);
  EXPECT_EQ(s.direct_sources, 4u);
  EXPECT_EQ(s.direct_replies, 4u);
  EXPECT_EQ(s.staged_segments, 0u);
  EXPECT_EQ(s.staged_replies, 0u);
  EXPECT_EQ(s.staging_buffers, 0u);
  EXPECT_GE(s.cache_hits, 8u);

  // Unregistered, the same memory goes through staging again.
  ASSERT_TRUE(rdma::RdmaUnregisterHostMemory(*conn_, src).ok());
  EXPECT_EQ(rdma::RdmaUnregisterHostMemory(*conn_, src).code(), Err::kHostMemoryNotRegistered);
  RoundTrip({src, kMiB}, {dst, kMiB});
  s = rdma::GetRequesterStats(*conn_);
  EXPECT_EQ(s.staged_segments, 1u);
  EXPECT_EQ(s.direct_replies, 5u);
  conn_.reset();  // deregisters before the memory goes
  std::free(src);
  std::free(dst);
}

TEST_F(RdmaTransport, ManySmallFramesExhaustAndRefillCredits) {
  // The executor pauses; the requester's sends run out of credits and wait; then everything
  // flows again. Frames carry a little inline bulk and expect no reply.
  OutFrame pause;
  std::vector<uint64_t> pause_body = Body(kPause, 300);
  pause.body = pause_body;
  pause.tag = ++tag_;
  uint64_t t0 = MonotonicNanos();
  ASSERT_TRUE(conn_->Send(pause).ok());
  const int kFrames = 3000;
  std::vector<std::byte> small = RandomBytes(100, 1);
  std::vector<uint64_t> echo = Body(kEcho, 1, 2);
  for (int i = 0; i < kFrames; i++) {
    OutFrame f;
    f.tag = ++tag_;
    f.body = echo;
    Status st = conn_->Send(f, small);
    ASSERT_TRUE(st.ok()) << i << ": " << st.ToString();
  }
  EXPECT_GE(Seconds(t0), 0.25) << "the sends should have waited for credits";
  auto count = Call(*conn_, ++tag_, Body(kCount));
  ASSERT_TRUE(count.ok()) << count.status().ToString();
  EXPECT_EQ(count->body.at(1), uint64_t{kFrames} + 2);
  std::printf("    %d frames in %.2f s; requester: %s\n", kFrames, Seconds(t0), rdma::GetRequesterStats(*conn_).channel.c_str());
}

TEST_F(RdmaTransport, NoticesQueueWhileTheRequesterIsNotReceiving) {
  // The executor posts notices while nobody receives: its queue waits for credits; the
  // requester then gets every one, in order, intact. Small notices are held in their receive
  // slots until more than half the slots are held, then copied out (credits keep flowing);
  // large ones (20000 bytes of bulk, no reply target) arrive as fragments.
  const uint64_t kNoticesN = 500, kBulk = 20000;
  OutFrame f;
  std::vector<uint64_t> body = Body(kNotices, kNoticesN, kBulk);
  f.body = body;
  f.tag = ++tag_;
  ASSERT_TRUE(conn_->Send(f).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::vector<std::byte> bulk;
  for (uint64_t i = 0; i < kNoticesN; i++) {
    auto in = conn_->Receive(30000);
    ASSERT_TRUE(in.ok()) << i << ": " << in.status().ToString();
    ASSERT_EQ(in->kind(), FrameKind::kNotice);
    ASSERT_EQ(in->body[1], i);
    uint64_t hash = in->body[2];
    bulk.resize(NoticeBulkBytes(i, kNoticesN, kBulk));
    ASSERT_EQ(in->header.bulk_bytes, bulk.size());
    ASSERT_TRUE(conn_->ReceiveBulk(bulk).ok());
    ASSERT_EQ(Hash(bulk), hash) << "notice " << i;
  }
  auto r = Call(*conn_, ++tag_, Body(kEcho));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::string stats = rdma::GetRequesterStats(*conn_).channel;
  std::printf("    requester: %s\n", stats.c_str());
  EXPECT_EQ(stats.find(" 0 records detached"), std::string::npos) << "the small notices should have been copied out";
}

TEST_F(RdmaTransport, ConcurrentSendAndReceive) {
  // One thread sends (echoes and 64 KiB fetches into distinct buffers), another receives.
  const int kCalls = 1500;
  std::vector<std::byte> data = RandomBytes(64 * 1024, 3);
  auto stored = Call(*conn_, ++tag_, Body(kStore), data);
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  std::vector<std::vector<std::byte>> fetched((kCalls + 99) / 100, std::vector<std::byte>(data.size()));
  uint64_t first = tag_ + 1;
  std::atomic<bool> failed{false};
  std::thread receiver([&] {
    for (int i = 0; i < kCalls; i++) {
      auto in = conn_->Receive(60000);
      if (!in.ok() || in->header.tag != first + uint64_t(i)) {
        ADD_FAILURE() << "reply " << i << ": " << (in.ok() ? fmt::format("tag {}", in->header.tag) : in.status().ToString());
        failed = true;
        return;
      }
      if (in->header.bulk_bytes > 0 && !conn_->ReceiveBulk(fetched[size_t(i) / 100]).ok()) {
        ADD_FAILURE() << "bulk " << i;
        failed = true;
        return;
      }
    }
  });
  std::vector<uint64_t> echo = Body(kEcho, 42);
  std::vector<uint64_t> fetch = Body(kFetch, data.size());
  for (int i = 0; i < kCalls && !failed; i++) {
    OutFrame f;
    f.flags = kFlagExpectsReply;
    f.tag = ++tag_;
    bool is_fetch = i % 100 == 0;
    f.body = is_fetch ? fetch : echo;
    Status st = conn_->Send(f, {}, is_fetch ? MutableBytes(fetched[size_t(i) / 100]) : MutableBytes());
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  receiver.join();
  for (const auto& b : fetched) EXPECT_EQ(std::memcmp(b.data(), data.data(), data.size()), 0);
}

// ---- failures --------------------------------------------------------------------------

TEST(RdmaFailure, RequesterKilledMidTransferEndsTheSessionCleanly) {
  REQUIRE_RDMA();
  TestServer server(RdmaAddress());
  ASSERT_TRUE(server.status().ok()) << server.status().ToString();
  std::promise<void> stalled;
  std::atomic<bool> once{false};
  server.set_on_stall([&] {
    if (!once.exchange(true)) stalled.set_value();
  });
  // The child sends 64 MiB; the executor has taken its first chunk when we kill the child.
  pid_t child = SpawnSelf({"--child-requester", server.url()});
  ASSERT_GT(child, 0);
  auto fut = stalled.get_future();
  ASSERT_EQ(fut.wait_for(std::chrono::seconds(60)), std::future_status::ready) << "the transfer never started";
  uint64_t t0 = MonotonicNanos();
  ::kill(child, SIGKILL);
  Reap(child);
  Status end = server.WaitSessionEnd(20000);
  double took = Seconds(t0);
  EXPECT_EQ(end.code(), Err::kDevicesUnavailable) << end.ToString();
  EXPECT_LT(took, 10.0);
  std::printf("    executor saw: %s (after %.2f s)\n", end.ToString().c_str(), took);

  // The server is unharmed: a new session works.
  auto c = ConnectTo(server.url());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  std::vector<std::byte> data = RandomBytes(kMiB, 9), back(kMiB);
  auto st = Call(**c, 1, Body(kStore), data);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  auto fe = Call(**c, 2, Body(kFetch, kMiB), {}, back);
  ASSERT_TRUE(fe.ok()) << fe.status().ToString();
  EXPECT_EQ(back, data);
}

// A server in a child process (so that it can die), and a requester here.
class ChildServer {
 public:
  explicit ChildServer(const std::string& mode) {
    port_file_ = fmt::format("/tmp/rdma-child-server-{}-{}", ::getpid(), counter_++);
    ::unlink(port_file_.c_str());
    pid_ = SpawnSelf({"--child-server", RdmaAddress(), port_file_, mode});
    for (int i = 0; i < 600 && pid_ > 0; i++) {
      std::ifstream in(port_file_);
      if (std::getline(in, url_) && !url_.empty() && url_.back() == '$') {
        url_.pop_back();
        return;
      }
      url_.clear();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  ~ChildServer() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      Reap(pid_);
    }
    ::unlink(port_file_.c_str());
  }
  const std::string& url() const { return url_; }

 private:
  static inline int counter_ = 0;
  pid_t pid_ = -1;
  std::string port_file_;
  std::string url_;
};

TEST(RdmaFailure, ExecutorGoneWhileTheRequesterWaitsForAReply) {
  REQUIRE_RDMA();
  ChildServer server("normal");
  ASSERT_FALSE(server.url().empty()) << "the child server did not start";
  auto c = ConnectTo(server.url());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_TRUE(Call(**c, 1, Body(kEcho)).ok());
  uint64_t t0 = MonotonicNanos();
  auto r = Call(**c, 2, Body(kDie), {}, {}, -1);  // no timeout: it must not hang
  double took = Seconds(t0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Err::kDevicesUnavailable) << r.status().ToString();
  EXPECT_LT(took, 10.0);
  std::printf("    requester saw: %s (after %.2f s)\n", r.status().ToString().c_str(), took);
  // Everything after that fails at once, the same way.
  OutFrame f;
  std::vector<uint64_t> body = Body(kEcho);
  f.body = body;
  EXPECT_EQ((*c)->Send(f).code(), Err::kDevicesUnavailable);
  EXPECT_EQ((*c)->Receive(-1).status().code(), Err::kDevicesUnavailable);
}

void ExpectSendFailsWhenTheExecutorDiesMidTransfer(bool registered) {
  ChildServer server("die-on-stall");
  ASSERT_FALSE(server.url().empty()) << "the child server did not start";
  auto c = ConnectTo(server.url());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  std::vector<std::byte> data = RandomBytes(64 * kMiB, 5);
  if (registered) {
    ASSERT_TRUE(rdma::RdmaRegisterHostMemory(**c, data.data(), data.size()).ok());
  }
  OutFrame f;
  std::vector<uint64_t> body = Body(kStall);
  f.body = body;
  f.flags = kFlagExpectsReply;
  f.tag = 1;
  uint64_t t0 = MonotonicNanos();
  Status st = (*c)->Send(f, data);  // waits for segment acks / the source ack
  if (st.ok()) st = (*c)->Receive(-1).status();
  double took = Seconds(t0);
  EXPECT_EQ(st.code(), Err::kDevicesUnavailable) << st.ToString();
  EXPECT_LT(took, 30.0);
  std::printf("    requester saw: %s (after %.2f s)\n", st.ToString().c_str(), took);
}

TEST(RdmaFailure, ExecutorGoneMidTransferFromPageableMemory) {
  REQUIRE_RDMA();
  ExpectSendFailsWhenTheExecutorDiesMidTransfer(false);
}

TEST(RdmaFailure, ExecutorGoneMidTransferFromRegisteredMemory) {
  REQUIRE_RDMA();
  ExpectSendFailsWhenTheExecutorDiesMidTransfer(true);
}

TEST(RdmaFailure, ClientGoneBeforeItsRdmaConnection) {
  REQUIRE_RDMA();
  // A client that never makes its RDMA connection: the worker gives up by itself after a
  // while, or as soon as the TCP side goes, as here.
  TestServer server(RdmaAddress());
  ASSERT_TRUE(server.status().ok());
  auto ep = ParseEndpoint(server.url());
  ASSERT_TRUE(ep.ok());
  {
    auto sock = TcpConnect(ep->host, ep->port, 5000);
    ASSERT_TRUE(sock.ok());
    FrameSocket fs(sock->get());
    ASSERT_TRUE(RunClientHandshake(fs, ClientHandshakeOptions{}, {}, 5000).ok());
    std::array<std::byte, 64> boot;
    ASSERT_TRUE(fs.ReadBulk(boot, 5000).ok());  // the bootstrap; then go away
  }
  Status end = server.WaitSessionEnd(20000);
  EXPECT_EQ(end.code(), Err::kDevicesUnavailable) << end.ToString();
}

TEST(RdmaFailure, ConnectionWithoutTheSessionSecretIsRejected) {
  REQUIRE_RDMA();
  // Someone who did not authenticate learns the worker's rdma_cm port (here: we read the
  // bootstrap ourselves) and connects there with a wrong secret: rejected.
  TestServer server(RdmaAddress());
  ASSERT_TRUE(server.status().ok());
  auto ep = ParseEndpoint(server.url());
  ASSERT_TRUE(ep.ok());
  auto sock = TcpConnect(ep->host, ep->port, 5000);
  ASSERT_TRUE(sock.ok());
  FrameSocket fs(sock->get());
  ASSERT_TRUE(RunClientHandshake(fs, ClientHandshakeOptions{}, {}, 5000).ok());
  std::array<std::byte, rdma::kBootstrapFixedBytes> fixed;
  ASSERT_TRUE(fs.ReadBulk(fixed, 5000).ok());
  rdma::Bootstrap boot;
  ASSERT_TRUE(rdma::DecodeBootstrapFixed(fixed, &boot).ok());

  const rdma::VerbsApi& v = rdma::Verbs();
  rdma::EventChannel ec(v.create_event_channel());
  ASSERT_TRUE(ec);
  ASSERT_TRUE(rdma::SetNonBlocking(ec->fd).ok());
  rdma_cm_id* raw = nullptr;
  ASSERT_EQ(v.create_id(ec.get(), &raw, nullptr, RDMA_PS_TCP), 0);
  rdma::CmId id(raw);
  uint64_t deadline = MonotonicNanos() + 10'000'000'000ull;
  ASSERT_EQ(v.resolve_addr(id.get(), nullptr, reinterpret_cast<sockaddr*>(&boot.address), 5000), 0);
  auto ev = rdma::NextCmEvent(ec.get(), -1, deadline, "address");
  ASSERT_TRUE(ev.ok() && (*ev)->event == RDMA_CM_EVENT_ADDR_RESOLVED);
  *ev = rdma::CmEvent();
  ASSERT_EQ(v.resolve_route(id.get(), 5000), 0);
  ev = rdma::NextCmEvent(ec.get(), -1, deadline, "route");
  ASSERT_TRUE(ev.ok() && (*ev)->event == RDMA_CM_EVENT_ROUTE_RESOLVED);
  *ev = rdma::CmEvent();
  rdma::ConnectData wrong;
  wrong.secret = boot.secret;
  wrong.secret[0] ^= 1;
  wrong.recv_slots = 64;
  wrong.slot_bytes = 16384;
  auto data = rdma::EncodeConnectData(wrong);
  rdma_conn_param p{};
  p.private_data = data.data();
  p.private_data_len = static_cast<uint8_t>(data.size());
  p.qp_num = 0x1234;  // no QP: the request never gets that far
  p.retry_count = 7;
  ASSERT_EQ(v.connect(id.get(), &p), 0);
  ev = rdma::NextCmEvent(ec.get(), -1, deadline, "the answer");
  ASSERT_TRUE(ev.ok()) << ev.status().ToString();
  EXPECT_EQ((*ev)->event, RDMA_CM_EVENT_REJECTED) << ev->name();
  *ev = rdma::CmEvent();
  // The session's real client never comes; when its TCP connection goes, the worker gives up.
  sock->reset();
  Status end = server.WaitSessionEnd(20000);
  EXPECT_EQ(end.code(), Err::kDevicesUnavailable) << end.ToString();
}

// ---- child processes -------------------------------------------------------------------

int ChildRequester(const std::string& url) {
  auto c = ConnectTo(url);
  if (!c.ok()) {
    std::fprintf(stderr, "child requester: %s\n", c.status().ToString().c_str());
    return 2;
  }
  std::vector<std::byte> data = RandomBytes(64 * kMiB, 11);
  OutFrame f;
  std::vector<uint64_t> body = Body(kStall);
  f.body = body;
  f.flags = kFlagExpectsReply;
  f.tag = 1;
  Status st = (*c)->Send(f, data);  // the parent kills us in here
  std::fprintf(stderr, "child requester: Send returned %s\n", st.ToString().c_str());
  return 3;
}

int ChildServerMain(const std::string& host, const std::string& port_file, const std::string& mode) {
  TestServer server(host);
  if (!server.status().ok()) {
    std::fprintf(stderr, "child server: %s\n", server.status().ToString().c_str());
    return 2;
  }
  if (mode == "die-on-stall") server.set_on_stall([] { ::raise(SIGKILL); });
  {
    std::ofstream out(port_file + ".tmp");
    out << server.url() << "$\n";
  }
  std::rename((port_file + ".tmp").c_str(), port_file.c_str());
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // the parent kills us
}

// Fails the whole run (instead of hanging until the VM's time limit) if a test sticks.
class Watchdog : public ::testing::EmptyTestEventListener {
 public:
  Watchdog() {
    std::thread([this] {
      for (;;) {
        std::this_thread::sleep_for(std::chrono::seconds(1));
        uint64_t d = deadline_.load();
        if (d != 0 && MonotonicNanos() > d) {
          std::fprintf(stderr, "\nWATCHDOG: %s has run for more than %d s; aborting\n", name_.c_str(), kLimitS);
          std::_Exit(3);
        }
      }
    }).detach();
  }
  void OnTestStart(const ::testing::TestInfo& t) override {
    name_ = std::string(t.test_suite_name()) + "." + t.name();
    deadline_ = MonotonicNanos() + uint64_t{kLimitS} * 1000000000;
  }
  void OnTestEnd(const ::testing::TestInfo&) override { deadline_ = 0; }

 private:
  static constexpr int kLimitS = 180;
  std::atomic<uint64_t> deadline_{0};
  std::string name_;
};

}  // namespace
}  // namespace remora::rdmatest

int main(int argc, char** argv) {
  using namespace remora::rdmatest;
  ::signal(SIGPIPE, SIG_IGN);
  if (argc >= 3 && std::string(argv[1]) == "--child-requester") return ChildRequester(argv[2]);
  if (argc >= 5 && std::string(argv[1]) == "--child-server") return ChildServerMain(argv[2], argv[3], argv[4]);
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::UnitTest::GetInstance()->listeners().Append(new Watchdog);
  return RUN_ALL_TESTS();
}
