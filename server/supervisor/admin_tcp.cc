#include "supervisor/admin_tcp.h"

#include <sys/socket.h>

#include <capnp/rpc-twoparty.h>

#include "remora/base/log.h"

namespace remora::server {

// One connection's objects, destroyed in reverse order of their members (the RPC system
// before the network before the stream it reads).
struct TcpAdminConnections::Connection {
  std::string peer;
  kj::Own<kj::AsyncIoStream> raw;     // until the key exchange is done
  kj::Own<kj::AsyncIoStream> sealed;  // then
  kj::Own<capnp::TwoPartyVatNetwork> network;
  kj::Own<capnp::RpcSystem<capnp::rpc::twoparty::VatId>> rpc;
};

TcpAdminConnections::TcpAdminConnections(kj::Timer& timer, MakeLogin make_login)
    : timer_(timer), make_login_(std::move(make_login)), tasks_(*this) {}

TcpAdminConnections::~TcpAdminConnections() = default;

void TcpAdminConnections::Warn(const std::string& line) {
  uint64_t dropped = 0;
  if (budget_.Allow(&dropped))
    LOG_WARN("admin API (tcp): {}{}", line, dropped ? fmt::format(" ({} similar lines left out)", dropped) : "");
}

void TcpAdminConnections::Admit(kj::Own<kj::AsyncIoStream> stream) {
  struct sockaddr_storage ss = {};
  kj::uint len = sizeof(ss);
  std::string peer = "?";
  try {
    stream->getpeername(reinterpret_cast<struct sockaddr*>(&ss), &len);
    peer = PeerShareKey(reinterpret_cast<struct sockaddr*>(&ss), len);
  } catch (const kj::Exception&) {
    return;  // already gone
  }
  PeerShares::Decision d = shares_.Admit(peer);
  if (!d.admit) {
    Warn(fmt::format("connection from {} refused: {}", peer, d.refusal));
    if (refusing_ >= 64) return;  // closed without a word: refusals are being written already
    refusing_++;
    kj::AsyncIoStream& s = *stream;
    auto hello = kj::heapArray<kj::byte>(admin::kChannelHelloBytes);
    kj::byte* buf = hello.begin();
    // The refusal, then the client's hello read (closing with unread bytes would reset the
    // connection, which may discard the refusal at the client), within a second.
    tasks_.add(admin::SendRefusal(s, "the server's admin API is busy: " + d.refusal)
                   .then([&s, buf]() { return s.tryRead(buf, admin::kChannelHelloBytes, admin::kChannelHelloBytes); })
                   .ignoreResult()
                   .attach(kj::mv(stream), kj::mv(hello))
                   .exclusiveJoin(timer_.afterDelay(1 * kj::SECONDS))
                   .then([this]() { refusing_--; }, [this](kj::Exception&&) { refusing_--; }));
    return;
  }
  if (d.evict) {
    auto it = evict_.find(*d.evict);
    if (it != evict_.end()) it->second->fulfill();
    Warn(fmt::format("a connection of a peer holding more connections that have not logged in was dropped to "
                     "serve {}", peer));
  }
  uint64_t id = next_id_++;
  shares_.Add(id, peer);
  auto evicted = kj::newPromiseAndFulfiller<void>();
  evict_[id] = kj::mv(evicted.fulfiller);
  auto state = std::make_shared<AdminLoginState>();
  state->on_login = [this, id] { shares_.Settle(id); };
  auto done = [this, id]() {
    shares_.Remove(id);
    evict_.erase(id);
  };
  tasks_.add(Serve(peer, kj::mv(stream), state, kj::mv(evicted.promise))
                 .then([done]() { done(); }, [done](kj::Exception&&) { done(); }));
}

kj::Promise<void> TcpAdminConnections::Serve(std::string peer, kj::Own<kj::AsyncIoStream> stream,
                                             std::shared_ptr<AdminLoginState> state, kj::Promise<void> evicted) {
  auto conn = kj::heap<Connection>();
  conn->peer = std::move(peer);
  conn->raw = kj::mv(stream);
  Connection& c = *conn;
  kj::Promise<void> serving = admin::ServerKeyExchange(*c.raw, state->keys).then([this, &c, state]() {
    c.sealed = admin::SealStream(kj::mv(c.raw), state->keys, /*server_side=*/true, [this, &c](const char* why) {
      Warn(fmt::format("connection from {} ended: {}", c.peer, why));
    });
    c.network = kj::heap<capnp::TwoPartyVatNetwork>(*c.sealed, capnp::rpc::twoparty::Side::SERVER);
    c.rpc = kj::heap<capnp::RpcSystem<capnp::rpc::twoparty::VatId>>(capnp::makeRpcServer(*c.network, make_login_(state)));
    return c.network->onDisconnect();
  }, [this, &c](kj::Exception&& e) {
    Warn(fmt::format("connection from {} refused: {}", c.peer, e.getDescription().cStr()));
  });
  kj::Promise<void> deadline = timer_.afterDelay(kLoginDeadline).then([this, &c, state]() -> kj::Promise<void> {
    if (state->logged_in) return kj::NEVER_DONE;
    Warn(fmt::format("connection from {} dropped: no key exchange and login within {} s", c.peer,
                     kLoginDeadline / kj::SECONDS));
    return kj::READY_NOW;
  });
  return serving.exclusiveJoin(kj::mv(deadline)).exclusiveJoin(kj::mv(evicted)).attach(kj::mv(conn));
}

}  // namespace remora::server
