#include "supervisor/admin_service.h"

#include <sodium.h>
#include <sys/socket.h>
#include <unistd.h>

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>

#include <algorithm>
#include <climits>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <mutex>

#include "admin.capnp.h"
#include "remora/base/log.h"
#include "remora/base/util.h"
#include "remora/protocol/transport.h"
#include "supervisor/admin_endpoints.h"
#include "supervisor/admin_pool.h"

#include "supervisor/admin_tcp.h"
#include "supervisor/handshakes.h"
#include "supervisor/supervisor.h"

namespace remora::server {

namespace rpc = admin::rpc;

namespace {

void SetOutcome(rpc::Outcome::Builder o, const Status& st) {
  o.setCode(static_cast<uint32_t>(st.code()));
  if (!st.ok()) o.setMessage(st.message());
}

// The Admin capability. Every method runs its body on the supervisor's loop thread (the RPC
// thread waits in Call meanwhile, so the results builder is never touched concurrently).
class AdminImpl final : public rpc::Admin::Server {
 public:
  explicit AdminImpl(Supervisor& sup) : sup_(sup) {}

  kj::Promise<void> info(InfoContext ctx) override {
    auto res = ctx.getResults();
    sup_.Call([&] {
      auto i = res.initInfo();
      i.setVersion(REMORA_VERSION);
      char host[256] = {};
      gethostname(host, sizeof(host) - 1);
      i.setHostname(host);
      i.setBackend(sup_.inventory().backend);
      i.setEmulated(sup_.inventory().emulated);
      i.setDriverVersion(sup_.inventory().driver_version);
      i.setPid(static_cast<int32_t>(getpid()));
      i.setStartedAt(sup_.started_at());
      i.setAuthRequired(sup_.options().auth_required);
      return 0;
    });
    SetOutcome(res.initOutcome(), Status::Ok());
    return kj::READY_NOW;
  }

  kj::Promise<void> createTenant(CreateTenantContext ctx) override {
    auto p = ctx.getParams();
    std::string name = p.getName();
    std::optional<uint64_t> limit;
    if (p.getHasLimit()) limit = p.getMemoryLimit();
    std::optional<std::vector<int>> gpus;
    if (!p.getAllGpus()) {
      gpus.emplace();
      for (int32_t g : p.getGpus()) gpus->push_back(g);
    }
    std::optional<uint64_t> pool_limit;
    if (p.getHasPoolLimit()) pool_limit = p.getPoolLimit();
    Result<std::string> token =
        sup_.pooled() ? admin_pool::CreateTenant(sup_, name, limit, gpus.value_or(std::vector<int>{}), pool_limit)
        : pool_limit ? Result<std::string>(Status(Err::kNotSupported, "a limit across a pool needs a server of a pool (--pool)"))
                     : sup_.Call([&] { return sup_.CreateTenant(name, limit, gpus); });
    auto res = ctx.getResults();
    SetOutcome(res.initOutcome(), token.status());
    if (token.ok()) res.setToken(*token);
    return kj::READY_NOW;
  }

  kj::Promise<void> listTenants(ListTenantsContext ctx) override {
    auto res = ctx.getResults();
    sup_.Call([&] {
      const auto& tenants = sup_.tenants();
      auto list = res.initTenants(static_cast<unsigned>(tenants.size()));
      unsigned i = 0;
      for (const auto& [name, t] : tenants) FillTenant(list[i++], t);
      return 0;
    });
    SetOutcome(res.initOutcome(), Status::Ok());
    return kj::READY_NOW;
  }

  kj::Promise<void> setMemoryLimit(SetMemoryLimitContext ctx) override {
    auto p = ctx.getParams();
    std::string name = p.getName();
    std::optional<uint64_t> limit;
    if (p.getHasLimit()) limit = p.getMemoryLimit();
    Status st = sup_.pooled() ? admin_pool::SetMemoryLimit(sup_, name, limit)
                              : sup_.Call([&] { return sup_.SetMemoryLimit(name, limit); });
    SetOutcome(ctx.getResults().initOutcome(), st);
    return kj::READY_NOW;
  }

  kj::Promise<void> setCompute(SetComputeContext ctx) override {
    auto p = ctx.getParams();
    std::string name = p.getName();
    auto in = p.getSettings();
    sched::ComputeSettings settings;
    Status st;
    if (in.getHasWeight()) settings.weight = in.getWeight();
    if (in.getHasMax()) settings.max = sched::ComputeMax{in.getMaxQuotaUs(), in.getMaxPeriodUs()};
    std::string priority = in.getPriority();
    if (!priority.empty()) {
      auto parsed = sched::ParsePriority(priority);
      if (parsed.ok()) settings.priority = *parsed;
      else st = parsed.status();
    }
    if (st.ok() && sup_.pooled()) st = admin_pool::SetCompute(sup_, name, settings);
    else if (st.ok()) st = sup_.Call([&] { return sup_.SetCompute(name, settings); });
    SetOutcome(ctx.getResults().initOutcome(), st);
    return kj::READY_NOW;
  }

  kj::Promise<void> deleteTenant(DeleteTenantContext ctx) override {
    std::string name = ctx.getParams().getName();
    bool force = ctx.getParams().getForce();
    Status st = sup_.pooled() ? admin_pool::DeleteTenant(sup_, name, force)
                              : sup_.Call([&] { return sup_.DeleteTenant(name, force); });
    SetOutcome(ctx.getResults().initOutcome(), st);
    return kj::READY_NOW;
  }

  kj::Promise<void> listGpus(ListGpusContext ctx) override {
    auto res = ctx.getResults();
    sup_.Call([&] {
      const auto& gpus = sup_.inventory().gpus;
      auto list = res.initGpus(static_cast<unsigned>(gpus.size()));
      for (size_t i = 0; i < gpus.size(); i++) {
        const GpuInfo& g = gpus[i];
        auto b = list[static_cast<unsigned>(i)];
        b.setIndex(g.index);
        b.setName(g.name);
        b.setUuid(g.uuid);
        b.setPciBusId(g.pci_bus_id);
        b.setTotalMemory(g.total_memory);
        b.setUsed(sup_.ledger().GpuUsed(static_cast<uint32_t>(g.index)));
        std::vector<std::string> names;
        for (const auto& [name, t] : sup_.tenants())
          if (std::find(t.gpus.begin(), t.gpus.end(), g.index) != t.gpus.end()) names.push_back(name);
        auto tl = b.initTenants(static_cast<unsigned>(names.size()));
        for (size_t j = 0; j < names.size(); j++) tl.set(static_cast<unsigned>(j), names[j]);
        b.setComputeEnforced(sup_.ComputeEnforced(g.index));
        uint32_t turn = sup_.compute_board().TurnOwner(static_cast<uint32_t>(g.index));
        for (const auto& [pid, s] : sup_.sessions())
          if (turn != sched::kNoSession && s.ledger_slot == turn) b.setTurnSession(s.id);
      }
      return 0;
    });
    SetOutcome(res.initOutcome(), Status::Ok());
    return kj::READY_NOW;
  }

  kj::Promise<void> attach(AttachContext ctx) override {
    std::string name = ctx.getParams().getName();
    int gpu = ctx.getParams().getGpu();
    Status st = sup_.pooled() ? admin_pool::Attach(sup_, name, gpu) : sup_.Call([&] { return sup_.AttachGpu(name, gpu); });
    SetOutcome(ctx.getResults().initOutcome(), st);
    return kj::READY_NOW;
  }

  kj::Promise<void> detach(DetachContext ctx) override {
    std::string name = ctx.getParams().getName();
    int gpu = ctx.getParams().getGpu();
    Status st = sup_.pooled() ? admin_pool::Detach(sup_, name, gpu) : sup_.Call([&] { return sup_.DetachGpu(name, gpu); });
    SetOutcome(ctx.getResults().initOutcome(), st);
    return kj::READY_NOW;
  }

  kj::Promise<void> listSessions(ListSessionsContext ctx) override {
    auto res = ctx.getResults();
    sup_.Call([&] {
      std::vector<const SessionState*> all;
      for (const auto& [pid, s] : sup_.sessions()) all.push_back(&s);
      std::sort(all.begin(), all.end(), [](auto* a, auto* b) { return a->id < b->id; });
      auto list = res.initSessions(static_cast<unsigned>(all.size()));
      for (size_t i = 0; i < all.size(); i++) {
        const SessionState& s = *all[i];
        auto b = list[static_cast<unsigned>(i)];
        b.setId(s.id);
        b.setTenant(s.tenant);
        b.setClientPid(s.client.pid);
        b.setHost(s.client.hostname);
        b.setUser(s.client.user);
        b.setProgram(s.client.program);
        b.setTransport(TransportName(s.transport));
        b.setDataPath(TransportDataPath(s.transport));
        b.setPeer(s.peer);
        b.setStartedAt(s.started_at);
        uint64_t mem = 0, gpu_time = 0;
        for (uint32_t g = 0; g < kLedgerMaxGpus; g++) {
          mem += sup_.ledger().SessionUsed(s.ledger_slot, g);
          gpu_time += sup_.compute_board().SessionUsageNs(s.ledger_slot, g);
        }
        b.setMemoryCurrent(mem);
        b.setGpuTimeNs(gpu_time);
        b.setWorkerPid(static_cast<int32_t>(s.pid));
        b.setMigrateFailed(s.migrate_failed);
      }
      return 0;
    });
    SetOutcome(res.initOutcome(), Status::Ok());
    return kj::READY_NOW;
  }

  kj::Promise<void> killSession(KillSessionContext ctx) override {
    uint64_t id = ctx.getParams().getId();
    std::string reason = ctx.getParams().getReason();
    if (reason.empty()) reason = "ended by the administrator";
    Status st = sup_.Call([&] { return sup_.KillSession(id, reason); });
    SetOutcome(ctx.getResults().initOutcome(), st);
    return kj::READY_NOW;
  }

  kj::Promise<void> migrateSession(MigrateSessionContext ctx) override {
    uint64_t id = ctx.getParams().getId();
    std::string url = ctx.getParams().getUrl();
    std::string token = ctx.getParams().getToken();
    Status st = sup_.Call([&] { return sup_.MigrateSession(id, url, token); });
    SetOutcome(ctx.getResults().initOutcome(), st);
    return kj::READY_NOW;
  }

  kj::Promise<void> poolInfo(PoolInfoContext ctx) override {
    auto res = ctx.getResults();
    Status st = sup_.pooled() ? admin_pool::FillInfo(sup_, res.initPool()) : NotPooled();
    SetOutcome(res.initOutcome(), st);
    return kj::READY_NOW;
  }

  kj::Promise<void> poolAttach(PoolAttachContext ctx) override {
    auto res = ctx.getResults();
    Status st = sup_.pooled() ? admin_pool::Place(sup_, ctx.getParams(), res) : NotPooled();
    SetOutcome(res.initOutcome(), st);
    return kj::READY_NOW;
  }

  kj::Promise<void> poolDetach(PoolDetachContext ctx) override {
    auto p = ctx.getParams();
    auto res = ctx.getResults();
    int n = 0;
    Status st = sup_.pooled() ? admin_pool::Detach(sup_, p.getTenant(), p.getServer(), p.getGpu(), &n) : NotPooled();
    res.setDetached(n);
    SetOutcome(res.initOutcome(), st);
    return kj::READY_NOW;
  }

  kj::Promise<void> poolAssign(PoolAssignContext ctx) override {
    auto p = ctx.getParams();
    Status st = sup_.pooled() ? admin_pool::Assign(sup_, p.getTenant(), p.getServer(), p.getGpu()) : NotPooled();
    SetOutcome(ctx.getResults().initOutcome(), st);
    return kj::READY_NOW;
  }

  kj::Promise<void> setPoolLimit(SetPoolLimitContext ctx) override {
    auto p = ctx.getParams();
    std::optional<uint64_t> limit;
    if (p.getHasLimit()) limit = p.getLimit();
    Status st = sup_.pooled() ? admin_pool::SetPoolLimit(sup_, p.getName(), limit) : NotPooled();
    SetOutcome(ctx.getResults().initOutcome(), st);
    return kj::READY_NOW;
  }

 private:
  static Status NotPooled() {
    return Status(Err::kNotSupported, "this Remora server is not part of a pool (remora-server --pool)");
  }

  // Loop thread only.
  void FillTenant(rpc::Tenant::Builder b, const TenantState& t) {
    b.setName(t.record.name);
    b.setHasLimit(t.record.memory_limit.has_value());
    b.setMemoryLimit(t.record.memory_limit.value_or(0));
    b.setCreatedAt(t.record.created_at);
    b.setHasPoolLimit(t.record.pool_limit.has_value());
    b.setPoolLimit(t.record.pool_limit.value_or(0));
    if (t.record.pool_limit) b.setPoolShare(sup_.ledger().TotalLimit(t.ledger_index));
    auto gl = b.initGpus(static_cast<unsigned>(t.gpus.size()));
    for (size_t i = 0; i < t.gpus.size(); i++) gl.set(static_cast<unsigned>(i), t.gpus[i]);
    uint64_t used = 0, overhead = 0, gpu_time = 0;
    std::vector<std::tuple<int, uint64_t, uint64_t, uint64_t>> per_gpu;
    TenantUsage first = sup_.ledger().Tenant(t.ledger_index, 0);
    for (const GpuInfo& g : sup_.inventory().gpus) {
      TenantUsage u = sup_.ledger().Tenant(t.ledger_index, static_cast<uint32_t>(g.index));
      uint64_t time = sup_.compute_board().TenantUsageNs(t.ledger_index, static_cast<uint32_t>(g.index));
      used += u.used;
      overhead += u.context_overhead;
      gpu_time += time;
      bool attached = std::find(t.gpus.begin(), t.gpus.end(), g.index) != t.gpus.end();
      if (attached || u.used != 0 || u.context_overhead != 0 || time != 0)
        per_gpu.emplace_back(g.index, u.used, u.context_overhead, time);
    }
    b.setMemoryUsed(used);
    b.setContextOverhead(overhead);
    b.setRefused(first.refused);
    b.setSessions(first.sessions);
    b.setGpuTimeNs(gpu_time);
    auto ul = b.initUsage(static_cast<unsigned>(per_gpu.size()));
    for (size_t i = 0; i < per_gpu.size(); i++) {
      auto e = ul[static_cast<unsigned>(i)];
      e.setGpu(std::get<0>(per_gpu[i]));
      e.setUsed(std::get<1>(per_gpu[i]));
      e.setContextOverhead(std::get<2>(per_gpu[i]));
      e.setGpuTimeNs(std::get<3>(per_gpu[i]));
    }
    const sched::ComputeSettings& cs = t.record.compute;
    auto c = b.initCompute();
    c.setHasWeight(cs.weight.has_value());
    c.setWeight(cs.effective_weight());
    c.setHasMax(cs.max.has_value());
    if (cs.max) {
      c.setMaxQuotaUs(cs.max->quota_us);
      c.setMaxPeriodUs(cs.max->period_us);
    }
    c.setPriority(std::string(sched::PriorityName(cs.priority)));
  }

  Supervisor& sup_;
};

// One challenge: checks one proof, once, and proves the server in return. The proof and the
// signature cover the sealed channel's binding (admin_channel.h), so neither can be used on
// another channel.
class ProverImpl final : public rpc::AdminProver::Server {
 public:
  ProverImpl(Supervisor& sup, const Verifier& key, std::string auth_message, std::shared_ptr<AdminLoginState> state)
      : sup_(sup), key_(key), auth_message_(std::move(auth_message)), state_(std::move(state)) {}

  kj::Promise<void> prove(ProveContext ctx) override {
    auto proof = ctx.getParams().getProof();
    auto res = ctx.getResults();
    Key k{};
    bool ok = !used_ && proof.size() == k.size();
    used_ = true;
    if (ok) {
      std::memcpy(k.data(), proof.begin(), k.size());
      ok = VerifyProof(key_.stored_key, auth_message_, k);
    }
    if (!ok) {
      LOG_WARN("admin login over TCP refused: wrong admin token");
      SetOutcome(res.initOutcome(), Status(Err::kNotPermitted, "wrong admin token"));
      return kj::READY_NOW;
    }
    state_->logged_in = true;
    if (state_->on_login) state_->on_login();
    Key sig = ServerSignature(key_.server_key, auth_message_ + "|server");
    SetOutcome(res.initOutcome(), Status::Ok());
    res.setServerSignature(capnp::Data::Reader(sig.data(), sig.size()));
    res.setAdmin(kj::heap<AdminImpl>(sup_));
    return kj::READY_NOW;
  }

 private:
  Supervisor& sup_;
  Verifier key_;
  std::string auth_message_;
  std::shared_ptr<AdminLoginState> state_;
  bool used_ = false;
};

class LoginImpl final : public rpc::AdminLogin::Server {
 public:
  LoginImpl(Supervisor& sup, const Verifier& key, std::shared_ptr<AdminLoginState> state)
      : sup_(sup), key_(key), state_(std::move(state)) {}

  kj::Promise<void> challenge(ChallengeContext ctx) override {
    if (state_->challenged) return KJ_EXCEPTION(FAILED, "one admin challenge per connection");
    state_->challenged = true;
    auto cn_data = ctx.getParams().getClientNonce();
    Nonce cn{};
    if (cn_data.size() != cn.size()) return KJ_EXCEPTION(FAILED, "the client nonce must be 32 bytes");
    std::memcpy(cn.data(), cn_data.begin(), cn.size());
    Nonce sn = RandomNonce();
    auto res = ctx.getResults();
    res.setServerNonce(capnp::Data::Reader(sn.data(), sn.size()));
    res.setProver(kj::heap<ProverImpl>(sup_, key_, AdminAuthMessage(cn, sn, state_->keys.binding), state_));
    return kj::READY_NOW;
  }

 private:
  Supervisor& sup_;
  Verifier key_;
  std::shared_ptr<AdminLoginState> state_;
};

// Admin connections of one listener: at most `max` at once (kMaxConnections on the unix
// socket), each served by its own RPC system. The TCP listener's are TcpAdminConnections'
// (admin_tcp.h: sealed, per-peer shares, a login deadline), so its set is never full.
class ConnectionSet final : private kj::TaskSet::ErrorHandler {
  // One connection's objects, destroyed in reverse order of their members (the RPC system
  // before the network before the stream it reads).
  struct Connection {
    Connection(kj::Own<kj::AsyncIoStream> s, capnp::Capability::Client bootstrap)
        : stream(kj::mv(s)), network(*stream, capnp::rpc::twoparty::Side::SERVER),
          rpc(capnp::makeRpcServer(network, kj::mv(bootstrap))) {}
    kj::Own<kj::AsyncIoStream> stream;
    capnp::TwoPartyVatNetwork network;
    capnp::RpcSystem<capnp::rpc::twoparty::VatId> rpc;
  };

 public:
  static constexpr int kMaxConnections = 16;
  ConnectionSet(const char* what, int max = kMaxConnections) : what_(what), max_(max), tasks_(*this) {}

  bool Full() const { return active_ >= max_; }

  // Serves `stream` with `bootstrap`.
  void Serve(kj::Own<kj::AsyncIoStream> stream, capnp::Capability::Client bootstrap) {
    active_++;
    auto conn = kj::heap<Connection>(kj::mv(stream), kj::mv(bootstrap));
    kj::Promise<void> done = conn->network.onDisconnect();
    tasks_.add(done.attach(kj::mv(conn)).then([this]() { active_--; }, [this](kj::Exception&&) { active_--; }));
  }

  // Logs a refused or failed accept, at most a few lines per ten seconds.
  void Warn(const std::string& line) {
    uint64_t dropped = 0;
    if (budget_.Allow(&dropped))
      LOG_WARN("admin API ({}): {}{}", what_, line, dropped ? fmt::format(" ({} similar lines left out)", dropped) : "");
  }

 private:
  void taskFailed(kj::Exception&&) override {}
  const char* what_;
  int max_;
  int active_ = 0;
  LogBudget budget_{5, 10};
  kj::TaskSet tasks_;
};

using ServeFn = std::function<void(kj::Own<kj::AsyncIoStream>)>;

// Accepts until cancelled; an accept error (out of descriptors) is logged and retried after
// a pause instead of ending the admin API. kj's accept() throws EMFILE synchronously, so it
// is called inside evalNow: the error reaches the handler below on every round, the retry's
// included (N1: the retry used to throw outside any handler and end the admin thread).
kj::Promise<void> AcceptLoop(kj::ConnectionReceiver& listener, kj::Timer& timer, ConnectionSet& set, ServeFn serve) {
  return kj::evalNow([&listener]() { return listener.accept(); }).then(
      [&listener, &timer, &set, serve](kj::Own<kj::AsyncIoStream> stream) {
        if (set.Full()) set.Warn(fmt::format("{} connections already: one refused", ConnectionSet::kMaxConnections));
        else serve(kj::mv(stream));
        return AcceptLoop(listener, timer, set, serve);
      },
      [&listener, &timer, &set, serve](kj::Exception&& e) {
        set.Warn(std::string("accept failed (retrying in 100 ms): ") + e.getDescription().cStr());
        return timer.afterDelay(100 * kj::MILLISECONDS).then([&listener, &timer, &set, serve]() {
          return AcceptLoop(listener, timer, set, serve);
        });
      });
}

}  // namespace

struct AdminServer::Shared {
  std::mutex mu;
  bool stop = false;
  kj::Own<kj::CrossThreadPromiseFulfiller<void>> fulfiller;
};

AdminServer::AdminServer(Supervisor& sup) : sup_(sup), shared_(std::make_shared<Shared>()) {}

AdminServer::~AdminServer() {
  RequestStop();
  if (thread_.joinable()) thread_.join();
  if (!socket_path_.empty()) ::unlink(socket_path_.c_str());
}

Result<std::unique_ptr<AdminServer>> AdminServer::Start(Supervisor& sup, const AdminOptions& o) {
  std::unique_ptr<AdminServer> a(new AdminServer(sup));
  std::string path = o.state_dir + "/admin.sock";
  ASSIGN_OR_RETURN(a->unix_fd_, BindUnix(path));
  a->socket_path_ = path;
  if (!o.listen_url.empty()) {
    if (o.token_file.empty()) return Error(Err::kInvalidValue, "--admin-listen needs --admin-token-file");
    ASSIGN_OR_RETURN(a->admin_key_, LoadOrCreateAdminToken(o.token_file));
    ASSIGN_OR_RETURN(a->tcp_fd_, BindTcp(o.listen_url, &a->tcp_url_));
  }
  a->thread_ = std::thread([p = a.get()] { p->ThreadMain(); });
  LOG_INFO("admin API on {} (root or uid {} only){}", path, ::geteuid(),
           a->tcp_url_.empty() ? "" : fmt::format(" and {} (admin token login)", a->tcp_url_));
  return a;
}

void AdminServer::RequestStop() {
  std::lock_guard<std::mutex> lock(shared_->mu);
  shared_->stop = true;
  if (shared_->fulfiller) shared_->fulfiller->fulfill();
}

void AdminServer::ThreadMain() {
  try {
    auto io = kj::setupAsyncIo();
    auto paf = kj::newPromiseAndCrossThreadFulfiller<void>();
    {
      std::lock_guard<std::mutex> lock(shared_->mu);
      if (shared_->stop) paf.fulfiller->fulfill();
      shared_->fulfiller = kj::mv(paf.fulfiller);
    }
    constexpr auto kFlags = kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP | kj::LowLevelAsyncIoProvider::ALREADY_CLOEXEC |
                            kj::LowLevelAsyncIoProvider::ALREADY_NONBLOCK;
    kj::Timer& timer = io.provider->getTimer();
    Supervisor& sup = sup_;
    ConnectionSet unix_set("unix socket");
    capnp::Capability::Client admin = kj::heap<AdminImpl>(sup_);
    auto unix_listener = io.lowLevelProvider->wrapListenSocketFd(unix_fd_.release(), kFlags);
    kj::Promise<void> serving = AcceptLoop(*unix_listener, timer, unix_set, [&](kj::Own<kj::AsyncIoStream> stream) {
      struct ucred cred = {};
      kj::uint len = sizeof(cred);
      stream->getsockopt(SOL_SOCKET, SO_PEERCRED, &cred, &len);
      if (cred.uid != 0 && cred.uid != ::geteuid()) {
        LOG_WARN("admin connection from pid {} (uid {}) refused: only root or uid {} may administer this server",
                 cred.pid, cred.uid, ::geteuid());
        return;
      }
      // Workers never administer, even when they run as this server's uid.
      if (sup.Call([&] { return sup.IsWorkerOrDescendant(cred.pid); })) {
        LOG_WARN("admin connection from pid {} refused: it is a session worker (or was started by one)", cred.pid);
        return;
      }
      unix_set.Serve(kj::mv(stream), admin);
    });
    ConnectionSet tcp_set("tcp", INT_MAX);
    Verifier key = admin_key_;
    TcpAdminConnections tcp_conns(timer, [&sup, key](std::shared_ptr<AdminLoginState> state) {
      return capnp::Capability::Client(kj::heap<LoginImpl>(sup, key, std::move(state)));
    });
    kj::Maybe<kj::Own<kj::ConnectionReceiver>> tcp_listener;
    if (tcp_fd_) {
      auto listener = io.lowLevelProvider->wrapListenSocketFd(tcp_fd_.release(), kFlags);
      serving = serving.exclusiveJoin(AcceptLoop(*listener, timer, tcp_set, [&tcp_conns](kj::Own<kj::AsyncIoStream> stream) {
        tcp_conns.Admit(kj::mv(stream));
      }));
      tcp_listener = kj::mv(listener);
    }
    paf.promise.exclusiveJoin(kj::mv(serving)).wait(io.waitScope);
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->fulfiller = nullptr;
  } catch (const kj::Exception& e) {
    LOG_ERROR("admin API stopped: {}", e.getDescription().cStr());
  }
  finished_.store(true);
}

}  // namespace remora::server
