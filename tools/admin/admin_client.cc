#include "admin_client.h"

#include <netdb.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <thread>

#include "admin.capnp.h"
#include "common/admin_channel.h"
#include "remora/base/fd.h"
#include "remora/base/util.h"
#include "remora/protocol/auth.h"
#include "remora/protocol/transport.h"

namespace remora::admin {
namespace {

Status FromOutcome(rpc::Outcome::Reader o) {
  if (o.getCode() == 0) return Status::Ok();
  return Status(static_cast<Err>(o.getCode()), o.getMessage());
}

// `tcp`: the connection is the sealed admin channel (which the server closes only when it
// stops, or when the channel was broken on the way), not the unix socket (which it closes on
// peers it does not accept).
Status FromKj(const kj::Exception& e, bool tcp) {
  if (e.getType() == kj::Exception::Type::DISCONNECTED && tcp)
    return Status(Err::kDevicesUnavailable,
                  std::string("the admin connection over TCP broke (the server stopped, or the channel was cut or "
                              "altered on the way): ") + e.getDescription().cStr());
  if (e.getType() == kj::Exception::Type::DISCONNECTED)
    return Status(Err::kDevicesUnavailable,
                  "the server closed the admin connection (only root or the server's own user may administer it over "
                  "its socket; or the server stopped)");
  if (e.getType() == kj::Exception::Type::OVERLOADED)
    return Status(Err::kTimeout, "the server did not answer in time");
  return Status(Err::kDevicesUnavailable, std::string("admin API error: ") + e.getDescription().cStr());
}

Result<Fd> ConnectUnix(const std::string& path) {
  struct sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) return Error(Err::kInvalidValue, "socket path too long: {}", path);
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) return fd;
  int err = errno;
  if (err == ENOENT) return Error(Err::kDevicesUnavailable, "no remora-server admin socket at {}", path);
  if (err == ECONNREFUSED) return Error(Err::kDevicesUnavailable, "no remora-server is running on {} (stale socket)", path);
  if (err == EACCES || err == EPERM)
    return Error(Err::kNotPermitted, "permission denied on {}: run as root or as the server's user", path);
  return ErrnoStatus(Err::kDevicesUnavailable, "connect(" + path + ")", err);
}

Result<Fd> ConnectTcp(const Endpoint& ep, int timeout_ms) {
  struct addrinfo hints = {}, *ai = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  int rc = ::getaddrinfo(ep.host.c_str(), std::to_string(ep.port).c_str(), &hints, &ai);
  if (rc != 0) return Error(Err::kDevicesUnavailable, "{}: {}", ep.ToUrl(), gai_strerror(rc));
  Status last = Error(Err::kDevicesUnavailable, "{}: no address", ep.ToUrl());
  for (struct addrinfo* a = ai; a != nullptr; a = a->ai_next) {
    Fd fd(::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));  // bounds connect()
    if (::connect(fd.get(), a->ai_addr, a->ai_addrlen) == 0) {
      struct timeval none = {0, 0};
      ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &none, sizeof(none));
      ::freeaddrinfo(ai);
      return fd;
    }
    last = ErrnoStatus(Err::kDevicesUnavailable, "connect(" + ep.ToUrl() + ")", errno);
  }
  ::freeaddrinfo(ai);
  return last;
}

class Client final : public AdminClient {
 public:
  ~Client() noexcept override {
    if (executor_) {
      try {
        executor_->executeSync([this] { stop_->fulfill(); });
      } catch (const kj::Exception&) {
      }
    }
    if (thread_.joinable()) thread_.join();
  }

  Status Open(const ConnectOptions& o) {
    timeout_ms_ = o.timeout_ms;
    bool tcp = false;
    Fd fd;
    if (!o.url.empty()) {
      if (o.url.rfind("unix://", 0) == 0) {
        ASSIGN_OR_RETURN(fd, ConnectUnix(o.url.substr(7)));
      } else if (o.url.rfind("tcp://", 0) == 0) {
        ASSIGN_OR_RETURN(Endpoint ep, ParseEndpoint(o.url));
        if (o.token.empty()) return Error(Err::kInvalidValue, "the admin API over TCP needs the admin token");
        ASSIGN_OR_RETURN(token_, ParseToken(o.token));
        ASSIGN_OR_RETURN(fd, ConnectTcp(ep, o.timeout_ms));
        // The sealed channel first (admin_channel.h): nothing else crosses the wire in clear.
        ASSIGN_OR_RETURN(keys_, ClientKeyExchange(fd.get(), o.timeout_ms));
        tcp = true;
      } else {
        return Error(Err::kInvalidValue, "admin URL {}: expected unix:///path/admin.sock or tcp://HOST:PORT", o.url);
      }
    } else if (!o.state_dir.empty()) {
      ASSIGN_OR_RETURN(fd, ConnectUnix(o.state_dir + "/admin.sock"));
    } else {
      return Error(Err::kInvalidValue, "no server given: a state directory or an admin URL");
    }
    tcp_ = tcp;
    std::promise<Status> ready;
    auto started = ready.get_future();
    thread_ = std::thread([this, sock = fd.release(), tcp, r = std::move(ready)]() mutable { Main(sock, tcp, r); });
    return started.get();
  }

  Result<ServerInfo> Info() override {
    return Do<ServerInfo>([](rpc::Admin::Client& a) { return a.infoRequest(); },
                          [](auto& res, ServerInfo& out) {
                            auto i = res.getInfo();
                            out.version = i.getVersion();
                            out.hostname = i.getHostname();
                            out.backend = i.getBackend();
                            out.emulated = i.getEmulated();
                            out.driver_version = i.getDriverVersion();
                            out.pid = i.getPid();
                            out.started_at = i.getStartedAt();
                            out.auth_required = i.getAuthRequired();
                          });
  }

  Result<std::string> CreateTenant(const std::string& name, std::optional<uint64_t> memory_limit,
                                   std::optional<std::vector<int>> gpus) override {
    return Do<std::string>(
        [&](rpc::Admin::Client& a) {
          auto req = a.createTenantRequest();
          req.setName(name);
          req.setHasLimit(memory_limit.has_value());
          req.setMemoryLimit(memory_limit.value_or(0));
          req.setAllGpus(!gpus.has_value());
          if (gpus) {
            auto l = req.initGpus(static_cast<unsigned>(gpus->size()));
            for (size_t i = 0; i < gpus->size(); i++) l.set(static_cast<unsigned>(i), (*gpus)[i]);
          }
          return req;
        },
        [](auto& res, std::string& out) { out = res.getToken(); });
  }

  Result<std::vector<TenantInfo>> ListTenants() override {
    return Do<std::vector<TenantInfo>>([](rpc::Admin::Client& a) { return a.listTenantsRequest(); },
                                       [](auto& res, std::vector<TenantInfo>& out) {
                                         for (auto t : res.getTenants()) {
                                           TenantInfo i;
                                           i.name = t.getName();
                                           if (t.getHasLimit()) i.memory_limit = t.getMemoryLimit();
                                           i.memory_used = t.getMemoryUsed();
                                           i.context_overhead = t.getContextOverhead();
                                           i.refused = t.getRefused();
                                           i.sessions = t.getSessions();
                                           for (int32_t g : t.getGpus()) i.gpus.push_back(g);
                                           for (auto u : t.getUsage())
                                             i.usage.push_back({u.getGpu(), u.getUsed(), u.getContextOverhead(), u.getGpuTimeNs()});
                                           i.created_at = t.getCreatedAt();
                                           i.gpu_time_ns = t.getGpuTimeNs();
                                           if (t.getHasPoolLimit()) i.pool_limit = t.getPoolLimit();
                                           i.pool_share = t.getPoolShare();
                                           auto c = t.getCompute();
                                           if (c.getHasWeight()) i.compute.weight = c.getWeight();
                                           if (c.getHasMax()) i.compute.max = sched::ComputeMax{c.getMaxQuotaUs(), c.getMaxPeriodUs()};
                                           auto prio = sched::ParsePriority(std::string(c.getPriority()));
                                           if (prio.ok()) i.compute.priority = *prio;
                                           out.push_back(std::move(i));
                                         }
                                       });
  }

  Status SetMemoryLimit(const std::string& name, std::optional<uint64_t> limit) override {
    return Simple([&](rpc::Admin::Client& a) {
      auto req = a.setMemoryLimitRequest();
      req.setName(name);
      req.setHasLimit(limit.has_value());
      req.setMemoryLimit(limit.value_or(0));
      return req;
    });
  }

  Status SetCompute(const std::string& name, const sched::ComputeSettings& settings) override {
    return Simple([&](rpc::Admin::Client& a) {
      auto req = a.setComputeRequest();
      req.setName(name);
      auto c = req.initSettings();
      c.setHasWeight(settings.weight.has_value());
      c.setWeight(settings.weight.value_or(0));
      c.setHasMax(settings.max.has_value());
      if (settings.max) {
        c.setMaxQuotaUs(settings.max->quota_us);
        c.setMaxPeriodUs(settings.max->period_us);
      }
      c.setPriority(std::string(sched::PriorityName(settings.priority)));
      return req;
    });
  }

  Status DeleteTenant(const std::string& name, bool force) override {
    return Simple([&](rpc::Admin::Client& a) {
      auto req = a.deleteTenantRequest();
      req.setName(name);
      req.setForce(force);
      return req;
    });
  }

  Result<std::vector<GpuInfo>> ListGpus() override {
    return Do<std::vector<GpuInfo>>([](rpc::Admin::Client& a) { return a.listGpusRequest(); },
                                    [](auto& res, std::vector<GpuInfo>& out) {
                                      for (auto g : res.getGpus()) {
                                        GpuInfo i;
                                        i.index = g.getIndex();
                                        i.name = g.getName();
                                        i.uuid = g.getUuid();
                                        i.pci_bus_id = g.getPciBusId();
                                        i.total_memory = g.getTotalMemory();
                                        i.used = g.getUsed();
                                        for (auto t : g.getTenants()) i.tenants.push_back(t);
                                        i.compute_enforced = g.getComputeEnforced();
                                        i.turn_session = g.getTurnSession();
                                        out.push_back(std::move(i));
                                      }
                                    });
  }

  Status Attach(const std::string& name, int gpu) override {
    return Simple([&](rpc::Admin::Client& a) {
      auto req = a.attachRequest();
      req.setName(name);
      req.setGpu(gpu);
      return req;
    });
  }

  Status Detach(const std::string& name, int gpu) override {
    return Simple([&](rpc::Admin::Client& a) {
      auto req = a.detachRequest();
      req.setName(name);
      req.setGpu(gpu);
      return req;
    });
  }

  Result<std::vector<SessionInfo>> ListSessions() override {
    return Do<std::vector<SessionInfo>>([](rpc::Admin::Client& a) { return a.listSessionsRequest(); },
                                        [](auto& res, std::vector<SessionInfo>& out) {
                                          for (auto s : res.getSessions()) {
                                            SessionInfo i;
                                            i.id = s.getId();
                                            i.tenant = s.getTenant();
                                            i.client_pid = s.getClientPid();
                                            i.host = s.getHost();
                                            i.user = s.getUser();
                                            i.program = s.getProgram();
                                            i.transport = s.getTransport();
                                            i.data_path = s.getDataPath();
                                            i.migrate_failed = s.getMigrateFailed();
                                            i.gpu_time_ns = s.getGpuTimeNs();
                                            i.peer = s.getPeer();
                                            i.started_at = s.getStartedAt();
                                            i.memory_current = s.getMemoryCurrent();
                                            i.worker_pid = s.getWorkerPid();
                                            out.push_back(std::move(i));
                                          }
                                        });
  }

  Status KillSession(uint64_t id, const std::string& reason) override {
    return Simple([&](rpc::Admin::Client& a) {
      auto req = a.killSessionRequest();
      req.setId(id);
      req.setReason(reason);
      return req;
    });
  }

  Status MigrateSession(uint64_t id, const std::string& url, const std::string& token) override {
    return Simple([&](rpc::Admin::Client& a) {
      auto req = a.migrateSessionRequest();
      req.setId(id);
      req.setUrl(url);
      req.setToken(token);
      return req;
    });
  }

  Result<std::string> CreatePoolTenant(const std::string& name, std::optional<uint64_t> memory_limit,
                                       std::optional<uint64_t> pool_limit, std::optional<std::vector<int>> gpus) override {
    return Do<std::string>(
        [&](rpc::Admin::Client& a) {
          auto req = a.createTenantRequest();
          req.setName(name);
          req.setHasLimit(memory_limit.has_value());
          req.setMemoryLimit(memory_limit.value_or(0));
          req.setHasPoolLimit(pool_limit.has_value());
          req.setPoolLimit(pool_limit.value_or(0));
          req.setAllGpus(false);
          std::vector<int> g = gpus.value_or(std::vector<int>{});
          auto l = req.initGpus(static_cast<unsigned>(g.size()));
          for (size_t i = 0; i < g.size(); i++) l.set(static_cast<unsigned>(i), g[i]);
          return req;
        },
        [](auto& res, std::string& out) { out = res.getToken(); });
  }

  Result<PoolInfo> Pool() override {
    return Do<PoolInfo>([](rpc::Admin::Client& a) { return a.poolInfoRequest(); },
                        [](auto& res, PoolInfo& out) {
                          auto p = res.getPool();
                          out.name = p.getName();
                          for (auto e : p.getEndpoints()) out.endpoints.emplace_back(e);
                          out.prefix = p.getPrefix();
                          out.revision = p.getRevision();
                          out.fresh = p.getFresh();
                          out.registered = p.getRegistered();
                          for (auto s : p.getServers()) {
                            PoolServerInfo i;
                            i.name = s.getName();
                            for (auto u : s.getUrls()) i.urls.emplace_back(u);
                            i.backend = s.getBackend();
                            i.emulated = s.getEmulated();
                            i.version = s.getVersion();
                            i.health = s.getHealth();
                            i.started_at = s.getStartedAt();
                            i.updated_at = s.getUpdatedAt();
                            i.sessions = s.getSessions();
                            i.applied_revision = s.getAppliedRevision();
                            out.servers.push_back(std::move(i));
                          }
                          for (auto g : p.getGpus()) {
                            PoolGpuInfo i;
                            i.server = g.getServer();
                            i.index = g.getIndex();
                            i.uuid = g.getUuid();
                            i.name = g.getName();
                            i.total_memory = g.getTotalMemory();
                            i.used = g.getUsed();
                            for (auto t : g.getTenants()) i.tenants.emplace_back(t);
                            i.gone = g.getGone();
                            out.gpus.push_back(std::move(i));
                          }
                          for (auto t : p.getTenants()) {
                            PoolTenantInfo i;
                            i.name = t.getName();
                            if (t.getHasLimit()) i.memory_limit = t.getMemoryLimit();
                            if (t.getHasPoolLimit()) i.pool_limit = t.getPoolLimit();
                            i.used = t.getUsed();
                            i.shares = t.getShares();
                            i.sessions = t.getSessions();
                            i.gpus = t.getGpus();
                            for (auto h : t.getServers())
                              i.servers.push_back({h.getServer(), h.getUsed(), h.getSessions(), h.getShare()});
                            out.tenants.push_back(std::move(i));
                          }
                          for (auto a : p.getAssignments())
                            out.assignments.push_back({a.getTenant(), a.getServer(), a.getGpu(), a.getUuid(), a.getGone()});
                        });
  }

  Result<std::vector<PoolAssignmentInfo>> PoolAttach(const PoolPlacement& r) override {
    return Do<std::vector<PoolAssignmentInfo>>(
        [&](rpc::Admin::Client& a) {
          auto req = a.poolAttachRequest();
          req.setTenant(r.tenant);
          req.setCount(r.count);
          req.setPolicy(r.policy);
          req.setModel(r.model);
          req.setMinFreeMemory(r.min_free_memory);
          auto l = req.initServers(static_cast<unsigned>(r.servers.size()));
          for (size_t i = 0; i < r.servers.size(); i++) l.set(static_cast<unsigned>(i), r.servers[i]);
          return req;
        },
        [](auto& res, std::vector<PoolAssignmentInfo>& out) {
          for (auto a : res.getPlaced()) out.push_back({a.getTenant(), a.getServer(), a.getGpu(), a.getUuid(), a.getGone()});
        });
  }

  Result<int> PoolDetach(const std::string& tenant, const std::string& server, int gpu) override {
    return Do<int>(
        [&](rpc::Admin::Client& a) {
          auto req = a.poolDetachRequest();
          req.setTenant(tenant);
          req.setServer(server);
          req.setGpu(gpu);
          return req;
        },
        [](auto& res, int& out) { out = res.getDetached(); });
  }

  Status PoolAssign(const std::string& tenant, const std::string& server, int gpu) override {
    return Simple([&](rpc::Admin::Client& a) {
      auto req = a.poolAssignRequest();
      req.setTenant(tenant);
      req.setServer(server);
      req.setGpu(gpu);
      return req;
    });
  }

  Status SetPoolLimit(const std::string& name, std::optional<uint64_t> limit) override {
    return Simple([&](rpc::Admin::Client& a) {
      auto req = a.setPoolLimitRequest();
      req.setName(name);
      req.setHasLimit(limit.has_value());
      req.setLimit(limit.value_or(0));
      return req;
    });
  }

 private:
  // Runs one request on the RPC thread: `build` makes it, `read` converts the answer (only
  // called when the server's outcome is success).
  template <typename T, typename Build, typename Read>
  Result<T> Do(Build&& build, Read&& read) {
    if (!executor_) return Status(Err::kDevicesUnavailable, "not connected");
    T out{};
    Status st;
    try {
      st = executor_->executeSync([&]() -> kj::Promise<Status> {
        auto req = build(*admin_);
        auto p = req.send().then([&](auto res) -> Status {
          Status s = FromOutcome(res.getOutcome());
          if (s.ok()) read(res, out);
          return s;
        });
        return timer_->timeoutAfter(timeout_ms_ * kj::MILLISECONDS, kj::mv(p));
      });
    } catch (const kj::Exception& e) {
      st = FromKj(e, tcp_);
    }
    if (!st.ok()) return st;
    return out;
  }

  template <typename Build>
  Status Simple(Build&& build) {
    auto r = Do<int>(std::forward<Build>(build), [](auto&, int&) {});
    return r.take_status();
  }

  // The RPC thread.
  void Main(int sock, bool tcp, std::promise<Status>& ready) {
    try {
      auto io = kj::setupAsyncIo();
      timer_ = &io.provider->getTimer();
      kj::Own<kj::AsyncIoStream> stream = io.lowLevelProvider->wrapSocketFd(
          sock, kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP | kj::LowLevelAsyncIoProvider::ALREADY_CLOEXEC);
      if (tcp) stream = SealStream(kj::mv(stream), keys_, /*server_side=*/false);
      capnp::TwoPartyClient client(*stream);
      if (tcp) {
        Status st = Login(client, io);
        if (!st.ok()) {
          ready.set_value(st);
          return;
        }
      } else {
        admin_.emplace(client.bootstrap().castAs<rpc::Admin>());
      }
      auto paf = kj::newPromiseAndFulfiller<void>();
      stop_ = kj::mv(paf.fulfiller);
      executor_ = kj::getCurrentThreadExecutor().addRef();
      ready.set_value(Status::Ok());
      paf.promise.wait(io.waitScope);
      admin_.reset();
    } catch (const kj::Exception& e) {
      // Before `ready` was set: connection setup failed; after: nothing waits for us.
      try {
        ready.set_value(FromKj(e, tcp));
      } catch (const std::future_error&) {
      }
    }
  }

  Status Login(capnp::TwoPartyClient& client, kj::AsyncIoContext& io) {
    auto login = client.bootstrap().castAs<rpc::AdminLogin>();
    Nonce cn = RandomNonce();
    auto req = login.challengeRequest();
    req.setClientNonce(capnp::Data::Reader(cn.data(), cn.size()));
    auto ch = timer_->timeoutAfter(timeout_ms_ * kj::MILLISECONDS, req.send()).wait(io.waitScope);
    auto sn_data = ch.getServerNonce();
    Nonce sn{};
    if (sn_data.size() != sn.size()) return Status(Err::kInvalidValue, "malformed admin challenge");
    std::memcpy(sn.data(), sn_data.begin(), sn.size());
    std::string auth_message = AdminAuthMessage(cn, sn, keys_.binding);
    Key proof = ClientProof(token_.secret, auth_message);
    auto pr = ch.getProver().proveRequest();
    pr.setProof(capnp::Data::Reader(proof.data(), proof.size()));
    auto answer = timer_->timeoutAfter(timeout_ms_ * kj::MILLISECONDS, pr.send()).wait(io.waitScope);
    RETURN_IF_ERROR(FromOutcome(answer.getOutcome()));
    // The server proves in turn that it holds this token's verifier.
    auto sig = answer.getServerSignature();
    Key signature{};
    if (sig.size() != signature.size())
      return Status(Err::kNotPermitted, "the admin server did not prove that it knows the admin token");
    std::memcpy(signature.data(), sig.begin(), signature.size());
    if (!VerifyServerSignature(ServerKeyFor(token_.secret), auth_message + "|server", signature))
      return Status(Err::kNotPermitted, "the admin server's proof is wrong: it is not the server this token belongs to");
    admin_.emplace(answer.getAdmin());
    return Status::Ok();
  }

  std::thread thread_;
  int timeout_ms_ = 10000;
  Token token_;
  bool tcp_ = false;
  ChannelKeys keys_;  // of the sealed TCP channel
  // Set by the RPC thread before Open returns; used only on it (admin_, timer_, stop_).
  kj::Own<const kj::Executor> executor_;
  kj::Timer* timer_ = nullptr;
  kj::Own<kj::PromiseFulfiller<void>> stop_;
  std::optional<rpc::Admin::Client> admin_;
};

}  // namespace

Result<std::string> ReadTokenFile(const std::string& path) {
  std::ifstream in(path);
  std::string token;
  if (!in || !std::getline(in, token)) return Error(Err::kInitializationError, "cannot read admin token file {}", path);
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
  return token;
}

Result<ConnectOptions> ConnectOptionsFrom(const std::string& state_dir, const std::string& url,
                                          const std::string& token_file) {
  ConnectOptions c;
  if (!url.empty()) {
    c.url = url;
    if (url.rfind("tcp://", 0) == 0) {
      if (!token_file.empty()) {
        ASSIGN_OR_RETURN(c.token, ReadTokenFile(token_file));
      } else if (const char* t = std::getenv("REMORA_ADMIN_TOKEN"); t && *t) {
        c.token = t;
      } else {
        return Error(Err::kInvalidValue, "--admin {} needs the admin token: --admin-token-file FILE or REMORA_ADMIN_TOKEN",
                     url);
      }
    }
  } else if (!state_dir.empty()) {
    c.state_dir = state_dir;
  } else if (const char* e = std::getenv("REMORA_STATE_DIR"); e && *e) {
    c.state_dir = e;
  } else {
    return Error(Err::kInvalidValue, "which server? give --state-dir DIR (or set REMORA_STATE_DIR) or --admin URL");
  }
  return c;
}

Result<std::unique_ptr<AdminClient>> AdminClient::Connect(const ConnectOptions& options) {
  auto c = std::make_unique<Client>();
  RETURN_IF_ERROR(c->Open(options));
  return std::unique_ptr<AdminClient>(std::move(c));
}

}  // namespace remora::admin
