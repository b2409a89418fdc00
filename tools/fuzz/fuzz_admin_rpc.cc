// Fuzz target `admin_rpc`: the admin API (server/common/admin.capnp) as a peer reaches it -
// Cap'n Proto RPC messages on <state-dir>/admin.sock (bootstrap: Admin) and on the TCP admin
// listener (bootstrap: AdminLogin, the unauthenticated network side). A real Supervisor
// (host backend, two emulated GPUs, state in a temporary directory on /dev/shm) runs in this
// process with its admin service; each input is one connection.
//
// Input: one byte (bit 0: 0 = unix socket, 1 = TCP listener; bit 1, TCP only: raw - the
// bytes go as they are, before any key exchange, so the channel's hello is what is fuzzed;
// else the harness makes the key exchange of the sealed admin channel and seals the bytes in
// its records, so the RPC behind it is), then the bytes the client sends, then end-of-stream. The harness reads whatever the server answers until it closes
// the connection. After each input every tenant the input created is deleted again.
// Checks besides memory safety: the server closes the connection within 10 s of the client's
// end-of-stream (no call hangs), and the admin API still accepts connections afterwards.
// REMORA_WORKER names remora-worker (default: next to this program), which the supervisor
// runs once to probe its emulated GPUs.
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <unistd.h>

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "admin.capnp.h"
#include "common/admin_channel.h"
#include "fuzz_input.h"
#include "secure/aead.h"
#include "remora/base/log.h"
#include "remora/protocol/auth.h"
#include "supervisor/supervisor.h"

namespace remora::fuzz {
namespace {

namespace rpc = admin::rpc;
constexpr int kCloseTimeoutMs = 10000;

std::string SelfDir() {
  return std::filesystem::canonical("/proc/self/exe").parent_path().string();
}

uint16_t FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

struct Server {
  std::string dir;
  uint16_t tcp_port = 0;
  std::unique_ptr<server::Supervisor> sup;
  std::thread loop;

  Server() {
    char tmpl[] = "/dev/shm/remora-fuzz-admin.XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) Finding("mkdtemp");
    dir = tmpl;
    tcp_port = FreePort();
    server::ServerOptions o;
    o.state_dir = dir + "/state";
    std::filesystem::create_directories(o.state_dir);
    o.listen = {"shm://" + dir + "/remora.sock"};
    o.backend = "host";
    o.host_gpus = 2;
    o.host_gpu_memory = "1GiB";
    o.auth_required = true;
    const char* w = std::getenv("REMORA_WORKER");
    o.worker_path = w ? w : SelfDir() + "/remora-worker";
    o.admin_listen = "tcp://127.0.0.1:" + std::to_string(tcp_port);
    o.admin_token_file = dir + "/admin.token";
    sup = std::make_unique<server::Supervisor>(o);
    Status st = sup->Start();
    if (!st.ok()) Finding("the supervisor did not start", st.ToString());
    loop = std::thread([this] { sup->Run(); });
    loop.detach();  // runs for the life of the process
  }

  // A TCP connect that fails is retried for a few seconds before it is a finding: a machine
  // running many fuzzing processes can run short of local ports or connection slots for a
  // moment (seen once in 3.4 million executions with 32 processes on 16 cores), which says
  // nothing about the server; a listener that is gone fails every retry.
  int Connect(bool tcp) {
    int fd;
    if (tcp) {
      struct sockaddr_in a = {};
      a.sin_family = AF_INET;
      a.sin_port = htons(tcp_port);
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      for (;;) {
        fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) break;
        int err = errno;
        if (fd >= 0) ::close(fd);
        if (std::chrono::steady_clock::now() > deadline)
          Finding("the TCP admin API stopped serving", std::strerror(err));
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    } else {
      fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      struct sockaddr_un a = {};
      a.sun_family = AF_UNIX;
      std::string path = dir + "/state/admin.sock";
      std::strncpy(a.sun_path, path.c_str(), sizeof(a.sun_path) - 1);
      if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) Finding("the admin API stopped serving");
    }
    return fd;
  }

  void ForgetTenants() {
    sup->Call([&] {
      std::vector<std::string> names;
      for (const auto& [name, t] : sup->tenants()) names.push_back(name);
      for (const auto& n : names) (void)sup->DeleteTenant(n, true);
      return 0;
    });
  }
};

// The server's directory goes when the process exits normally (libFuzzer's end of a run);
// after a finding it stays, with the state the finding left.
std::string* server_dir = nullptr;
void RemoveServerDir() {
  std::error_code ec;
  if (server_dir != nullptr) std::filesystem::remove_all(*server_dir, ec);
}

Server& TheServer() {
  static Server* s = [] {
    auto* made = new Server();
    server_dir = new std::string(made->dir);
    std::atexit(RemoveServerDir);
    return made;
  }();
  return *s;
}

void Exchange(int fd, std::span<const uint8_t> bytes) {
  size_t off = 0;
  std::vector<char> sink(65536);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kCloseTimeoutMs);
  bool sent_eof = false;
  for (;;) {
    struct pollfd p = {fd, static_cast<short>(POLLIN | (sent_eof ? 0 : POLLOUT)), 0};
    int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count());
    if (left <= 0) Finding("the admin API did not close a connection after the client's end-of-stream");
    if (::poll(&p, 1, left) <= 0) continue;
    if (p.revents & POLLIN) {
      ssize_t r = ::read(fd, sink.data(), sink.size());
      if (r <= 0) return;  // closed: done
    }
    if (!sent_eof && (p.revents & POLLOUT)) {
      ssize_t w = off < bytes.size() ? ::send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT) : 0;
      if (w > 0) off += static_cast<size_t>(w);
      if (off >= bytes.size() || w < 0) {
        ::shutdown(fd, SHUT_WR);
        sent_eof = true;
      }
    }
  }
}

// ---- seeds: what a real client sends, captured from capnp's own RPC client ---------------
template <typename Build>
std::vector<uint8_t> Capture(Build build) {
  auto io = kj::setupAsyncIo();
  int sv[2];
  ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv);
  auto stream = io.lowLevelProvider->wrapSocketFd(sv[0], kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP);
  std::vector<uint8_t> out;
  {
    capnp::TwoPartyClient client(*stream);
    auto promises = build(client);
    io.provider->getTimer().afterDelay(50 * kj::MILLISECONDS).wait(io.waitScope);
    char buf[65536];
    for (;;) {
      ssize_t r = ::recv(sv[1], buf, sizeof(buf), MSG_DONTWAIT);
      if (r <= 0) break;
      out.insert(out.end(), buf, buf + r);
    }
  }
  ::close(sv[1]);
  return out;
}

const Seeds& MakeSeeds() {
  static const Seeds seeds = [] {
    Seeds s;
    auto add = [&](const std::string& name, uint8_t tcp, const std::vector<uint8_t>& bytes) {
      SeedWriter w;
      w.Put(tcp).Bytes(bytes.data(), bytes.size());
      s.emplace_back(name, w.bytes());
    };
    add("every-method", 0, Capture([](capnp::TwoPartyClient& c) {
          auto admin = c.bootstrap().castAs<rpc::Admin>();
          kj::Vector<kj::Promise<void>> all;
          auto keep = [&](auto&& p) { all.add(p.ignoreResult()); };
          keep(admin.infoRequest().send());
          auto ct = admin.createTenantRequest();
          ct.setName("alice");
          ct.setHasLimit(true);
          ct.setMemoryLimit(1 << 20);
          ct.setAllGpus(false);
          ct.initGpus(1).set(0, 1);
          keep(ct.send());
          keep(admin.listTenantsRequest().send());
          auto sl = admin.setMemoryLimitRequest();
          sl.setName("alice");
          sl.setHasLimit(true);
          sl.setMemoryLimit(2 << 20);
          keep(sl.send());
          keep(admin.listGpusRequest().send());
          auto at = admin.attachRequest();
          at.setName("alice");
          at.setGpu(0);
          keep(at.send());
          auto dt = admin.detachRequest();
          dt.setName("alice");
          dt.setGpu(1);
          keep(dt.send());
          keep(admin.listSessionsRequest().send());
          auto ks = admin.killSessionRequest();
          ks.setId(3);
          ks.setReason("fuzz");
          keep(ks.send());
          auto del = admin.deleteTenantRequest();
          del.setName("alice");
          del.setForce(true);
          keep(del.send());
          return all;
        }));
    add("create-many", 0, Capture([](capnp::TwoPartyClient& c) {
          auto admin = c.bootstrap().castAs<rpc::Admin>();
          kj::Vector<kj::Promise<void>> all;
          for (const char* n : {"a", "b-1", "c_2", "BAD NAME", ""}) {
            auto ct = admin.createTenantRequest();
            ct.setName(n);
            ct.setAllGpus(true);
            all.add(ct.send().ignoreResult());
          }
          return all;
        }));
    add("login", 1, Capture([](capnp::TwoPartyClient& c) {
          auto login = c.bootstrap().castAs<rpc::AdminLogin>();
          auto ch = login.challengeRequest();
          uint8_t nonce[32] = {1};
          ch.setClientNonce(capnp::Data::Reader(nonce, 32));
          auto challenged = ch.send();
          auto pr = challenged.getProver().proveRequest();
          uint8_t proof[32] = {2};
          pr.setProof(capnp::Data::Reader(proof, 32));
          auto proved = pr.send();
          kj::Vector<kj::Promise<void>> all;
          all.add(proved.getAdmin().listTenantsRequest().send().ignoreResult());
          all.add(proved.ignoreResult());
          all.add(challenged.ignoreResult());
          return all;
        }));
    add("login-bad-nonce", 1, Capture([](capnp::TwoPartyClient& c) {
          auto login = c.bootstrap().castAs<rpc::AdminLogin>();
          auto ch = login.challengeRequest();
          uint8_t nonce[5] = {1};
          ch.setClientNonce(capnp::Data::Reader(nonce, 5));
          kj::Vector<kj::Promise<void>> all;
          all.add(ch.send().ignoreResult());
          return all;
        }));
    return s;
  }();
  return seeds;
}

}  // namespace
}  // namespace remora::fuzz

REMORA_FUZZ_SEEDS(remora::fuzz::MakeSeeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace remora;
  fuzz::Server& s = fuzz::TheServer();
  fuzz::FuzzInput in(data, size);
  uint8_t mode = in.Byte();
  bool tcp = mode & 1, raw = mode & 2;
  int fd = s.Connect(tcp);
  std::span<const uint8_t> rest = in.Rest();
  std::vector<uint8_t> sealed;
  if (tcp && !raw) {
    auto keys = admin::ClientKeyExchange(fd, fuzz::kCloseTimeoutMs);
    if (!keys.ok()) fuzz::Finding("the sealed admin channel's key exchange failed", keys.status().ToString());
    secure::RecordCipher seal(Cipher::kChaCha20Poly1305, keys->client_to_server);
    for (size_t at = 0; at < rest.size(); at += secure::kMaxRecord) {
      size_t n = std::min(rest.size() - at, secure::kMaxRecord);
      size_t old = sealed.size();
      sealed.resize(old + n + secure::kRecordOverhead);
      seal.Seal(rest.data() + at, n, sealed.data() + old);
    }
    rest = sealed;
  }
  fuzz::Exchange(fd, rest);
  ::close(fd);
  s.ForgetTenants();
  return 0;
}
