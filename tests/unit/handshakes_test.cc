// server/supervisor/handshakes: a connection handed over after its handshake leaves the
// supervisor's epoll set. An entry left behind outlives the supervisor's descriptor (epoll
// keeps it while the open file lives, and the worker shares it): the supervisor's loop then
// woke on every byte the session's client sent, and each send paid for that wake-up.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <optional>
#include <thread>

#include "remora/base/fd.h"
#include "remora/protocol/frame_socket.h"
#include "remora/protocol/handshake.h"
#include "supervisor/handshakes.h"

namespace remora::server {
namespace {

// A connected loopback TCP pair: {client end, server end}.
std::pair<Fd, Fd> TcpPair() {
  Fd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  struct sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  EXPECT_EQ(::bind(listener.get(), reinterpret_cast<struct sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(::listen(listener.get(), 1), 0);
  EXPECT_EQ(::getsockname(listener.get(), reinterpret_cast<struct sockaddr*>(&addr), &len), 0);
  Fd client(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  EXPECT_EQ(::connect(client.get(), reinterpret_cast<struct sockaddr*>(&addr), sizeof(addr)), 0);
  Fd server(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
  return {std::move(client), std::move(server)};
}

// Drives `hs` from its epoll set until `handed` holds the connection (or 5 s pass).
void Drive(int epoll_fd, Handshakes& hs, const std::optional<PendingConnection>& handed) {
  for (int i = 0; i < 500 && !handed; i++) {
    struct epoll_event ev[8];
    int n = ::epoll_wait(epoll_fd, ev, 8, 10);
    for (int k = 0; k < n; k++)
      if (Handshakes::Owns(ev[k].data.u64)) hs.OnEvent(ev[k].data.u64);
  }
}

// After the hand-over: bytes the client sends wake nobody, and the socket is no longer in the
// set (EPOLL_CTL_DEL finds nothing).
void ExpectOutOfTheSet(int epoll_fd, int handed_fd, int client_fd) {
  ASSERT_EQ(::send(client_fd, "x", 1, MSG_NOSIGNAL), 1);
  struct epoll_event ev[8];
  EXPECT_EQ(::epoll_wait(epoll_fd, ev, 8, 50), 0) << "the supervisor's loop is woken by a handed-over session";
  errno = 0;
  EXPECT_EQ(::epoll_ctl(epoll_fd, EPOLL_CTL_DEL, handed_fd, nullptr), -1);
  EXPECT_EQ(errno, ENOENT);
}

ServerAuthPolicy NoAuth() {
  ServerAuthPolicy p;
  p.auth_required = false;
  p.encrypt = EncryptMode::kOff;
  return p;
}

TEST(Handshakes, AnAuthenticatedConnectionLeavesTheEpollSet) {
  Fd ep(::epoll_create1(EPOLL_CLOEXEC));
  std::optional<PendingConnection> handed;
  Handshakes hs(ep.get(), {}, [&](PendingConnection pc, AuthenticatedPeer) { handed = std::move(pc); });
  hs.SetPolicy(NoAuth());
  auto [client, server] = TcpPair();
  int client_fd = client.get();
  // The client waits for the Welcome the worker would send; closing the handed socket ends it.
  std::thread c([client_fd] {
    FrameSocket fs(client_fd);
    ClientHandshakeOptions o;
    o.encrypt = EncryptMode::kOff;
    (void)RunClientHandshake(fs, o, {}, 5000);
  });
  hs.Admit(PendingConnection{TransportKind::kTcp, std::move(server), "test", {}});
  Drive(ep.get(), hs, handed);
  ASSERT_TRUE(handed.has_value());
  EXPECT_EQ(hs.size(), 0u);
  ExpectOutOfTheSet(ep.get(), handed->socket.get(), client_fd);
  handed.reset();  // closes the server end: the client's wait ends
  c.join();
}

TEST(Handshakes, ADataConnectionLeavesTheEpollSet) {
  Fd ep(::epoll_create1(EPOLL_CLOEXEC));
  std::optional<PendingConnection> handed;
  Handshakes hs(ep.get(), {}, [](PendingConnection, AuthenticatedPeer) { FAIL() << "a DataHello authenticated"; });
  hs.SetPolicy(NoAuth());
  hs.SetDataDone([&](PendingConnection pc, DataHello) { handed = std::move(pc); });
  auto [client, server] = TcpPair();
  int client_fd = client.get();
  std::thread c([client_fd] {
    FrameSocket fs(client_fd);
    SessionInfo info;
    info.session_id = 7;
    (void)RunDataHello(fs, info, 0, 5000);
  });
  hs.Admit(PendingConnection{TransportKind::kTcp, std::move(server), "test", {}});
  Drive(ep.get(), hs, handed);
  ASSERT_TRUE(handed.has_value());
  ExpectOutOfTheSet(ep.get(), handed->socket.get(), client_fd);
  handed.reset();
  c.join();
}

}  // namespace
}  // namespace remora::server
