// End-to-end tests of the RDMA Connection at the protocol level. Both sides run in this
// program (the executor in an in-process server, or in a child process when a side must die),
// over a real RDMA device: run it inside the Soft-RoCE VM (tests/rdma/vm-run.sh; ctest -L rdma).
// The device's address comes from REMORA_VM_RDMA_ADDR (set by vm-run.sh) or REMORA_RDMA_ADDR.
//
// This file: setting a connection up (capabilities, frames, a client that never connects, a
// connection without the session's secret), the child processes and main. Bulk transfers are
// in rdma_transport_bulk_test.cc, keepalives, credits and notices in
// rdma_transport_progress_test.cc; what they share in rdma_transport_fixture.h.
#include <atomic>
#include <cstdio>

#include "rdma/verbs_api.h"
#include "rdma/verbs_objects.h"
#include "rdma/wire.h"
#include "rdma_transport_fixture.h"
#include "remora/protocol/frame_socket.h"
#include "remora/protocol/handshake.h"
#include "tcp/tcp_connection.h"

namespace remora::rdmatest {
namespace {

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

// ---- a connection that does not come up -----------------------------------------------

// A client of `server` up to its RDMA connection: the TCP side connected and handshaken, and
// the first boot.size() bytes of the bootstrap read. `sock` receives the TCP connection.
void ClientUntilItsRdmaConnection(const TestServer& server, MutableBytes boot, Fd* sock) {
  auto ep = ParseEndpoint(server.url());
  ASSERT_TRUE(ep.ok());
  auto s = TcpConnect(ep->host, ep->port, 5000);
  ASSERT_TRUE(s.ok());
  FrameSocket fs(s->get());
  ASSERT_TRUE(RunClientHandshake(fs, ClientHandshakeOptions{}, {}, 5000).ok());
  ASSERT_TRUE(fs.ReadBulk(boot, 5000).ok());
  *sock = std::move(*s);
}

TEST(RdmaFailure, ClientGoneBeforeItsRdmaConnection) {
  REQUIRE_RDMA();
  // A client that never makes its RDMA connection: the worker gives up by itself after a
  // while, or as soon as the TCP side goes, as here.
  TestServer server(RdmaAddress());
  ASSERT_TRUE(server.status().ok());
  {
    Fd sock;
    std::array<std::byte, 64> boot;
    ASSERT_NO_FATAL_FAILURE(ClientUntilItsRdmaConnection(server, boot, &sock));  // then go away
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
  Fd sock;
  std::array<std::byte, rdma::kBootstrapFixedBytes> fixed;
  ASSERT_NO_FATAL_FAILURE(ClientUntilItsRdmaConnection(server, fixed, &sock));
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
  sock.reset();
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
