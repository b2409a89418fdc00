// The supervisor as a member of a pool of servers (--pool; docs/ARCHITECTURE.md, "A pool of
// servers"): its tenants come from the pool's mirror (pool/pool_agent.h) instead of the state
// database, its GPU attachments from the pool's assignments, and the ledger's total limit of
// each pool-limited tenant is this server's share of the tenant's pool-wide limit.
// Loop thread, like the rest; PoolLink is the agent's way in (through Call).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>

#include <fmt/ranges.h>

#include "control.capnp.h"
#include "pool/etcd_client.h"
#include "pool/pool_admin.h"
#include "pool/pool_agent.h"
#include "remora/base/log.h"
#include "remora/base/util.h"
#include "remora/protocol/frame_socket.h"
#include "remora/protocol/handshake.h"
#include "supervisor/pool_link.h"
#include "supervisor/supervisor.h"

namespace remora::server {

namespace {
constexpr int kFirstViewMs = 5000;      // Start waits this long for the pool's tenants
}  // namespace

pool::ServerRecord PoolLink::LocalRecord() {
  return s_.Call([&] { return s_.LocalPoolRecord(); });
}

void PoolLink::Apply(const pool::PoolView& view, bool fresh) {
  s_.Call([&] {
    s_.ApplyPool(view, fresh);
    return 0;
  });
}

void PoolLink::LeaseGranted(int64_t lease) {
  s_.Call([&] {
    s_.pool_lease_ = lease;
    return 0;
  });
}

void PoolLink::Fence(const std::string& why) {
  s_.Call([&] {
    s_.PoolFence(why);
    return 0;
  });
}

void PoolLink::RaiseShare(int64_t lease, const std::string& tenant, uint64_t bytes) {
  s_.Call([&] {
    auto it = s_.tenants_.find(tenant);
    if (lease == s_.pool_lease_ && it != s_.tenants_.end() && it->second.record.pool_limit)
      (void)s_.ledger_->SetTotalLimit(it->second.ledger_index, bytes);
    return 0;
  });
}

uint64_t PoolLink::LowerShare(const std::string& tenant, uint64_t bytes) {
  return s_.Call([&]() -> uint64_t {
    auto it = s_.tenants_.find(tenant);
    if (it == s_.tenants_.end()) return 0;
    // A tenant without a pool limit any more is unlimited here; its share just goes.
    if (it->second.record.pool_limit) (void)s_.ledger_->SetTotalLimit(it->second.ledger_index, bytes);
    return s_.ledger_->TenantClaimedTotal(it->second.ledger_index);
  });
}

std::map<std::string, pool::PoolHost::Claim> PoolLink::Claims() {
  return s_.Call([&] {
    std::map<std::string, Claim> out;
    for (const auto& [name, t] : s_.tenants_) {
      if (!t.record.pool_limit) continue;
      Claim c;
      c.bytes = s_.ledger_->TenantClaimedTotal(t.ledger_index);
      for (const auto& [pid, sess] : s_.sessions_) c.sessions += sess.tenant == name;
      out[name] = c;
    }
    return out;
  });
}

Status Supervisor::StartPool() {
  if (!options_.auth_required) return Error(Err::kInvalidValue, "--pool needs --auth token: a pool's tenants authenticate");
  if (options_.pool_name.empty()) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    pool_name_ = host;
  } else {
    pool_name_ = options_.pool_name;
  }
  RETURN_IF_ERROR(pool::ValidateServerName(pool_name_));
  std::vector<std::string> urls = options_.advertise;
  if (urls.empty()) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    for (auto& l : listeners_) {
      Endpoint ep = l->endpoint();
      if (ep.kind != TransportKind::kTcp) continue;
      if (ep.host == "0.0.0.0" || ep.host == "::" || ep.host.empty()) ep.host = host;
      urls.push_back(ep.ToUrl());
    }
  }
  if (urls.empty()) LOG_WARN("pool: no tcp:// listener and no --advertise: clients of the pool cannot reach this server");
  ASSIGN_OR_RETURN(auto http, pool::NewCurlHttpClient({options_.pool_ca, options_.pool_cert, options_.pool_key}));
  ASSIGN_OR_RETURN(auto etcd, pool::EtcdClient::Create({options_.pool, 2000}, std::move(http)));
  pool_store_ = std::move(etcd);
  pool::PoolKeys keys(options_.pool_prefix);
  pool_admin_ = std::make_unique<pool::PoolAdmin>(*pool_store_, keys);
  pool_link_ = std::make_unique<PoolLink>(*this);
  pool::AgentOptions ao;
  ao.prefix = options_.pool_prefix;
  ao.server_name = pool_name_;
  ao.urls = urls;
  ao.ttl_s = options_.pool_ttl_s;
  ao.refresh_ms = std::min(2000, options_.pool_ttl_s * 1000 / 2);
  ao.cache_file = options_.state_dir + "/pool-mirror.json";
  pool_ = std::make_unique<pool::PoolAgent>(*pool_store_, *pool_link_, ao);
  pool_->Start();
  LOG_INFO("pool: server '{}' of the pool at {} (keys under {}), clients reach it at {}", pool_name_,
           fmt::join(options_.pool, ","), options_.pool_prefix, fmt::join(urls, ","));
  // Clients are served once the pool's tenants are known (or the wait is over).
  uint64_t deadline = MonotonicNanos() + uint64_t(kFirstViewMs) * 1'000'000;
  while (!pool_applied_ && MonotonicNanos() < deadline) {
    RunQueuedCalls();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (!pool_applied_)
    LOG_WARN("pool: no view of the pool's tenants yet (the store is unreachable, and no copy in {}): clients are refused "
             "until it answers", ao.cache_file);
  return Status::Ok();
}

void Supervisor::StopPool() {
  if (!pool_) return;
  // The agent's threads may be waiting in Call(): serve them until it has stopped.
  std::thread stopper([this] { pool_->Stop(true); });
  while (!pool_->Stopped()) {
    RunQueuedCalls();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  stopper.join();
  RunQueuedCalls();
}

pool::ServerRecord Supervisor::LocalPoolRecord() {
  pool::ServerRecord r;
  for (const GpuInfo& g : inventory_.gpus)
    r.gpus.push_back({g.index, g.uuid, g.name, g.total_memory, ledger_->GpuUsed(static_cast<uint32_t>(g.index))});
  r.backend = inventory_.backend;
  r.emulated = inventory_.emulated;
  r.version = REMORA_VERSION;
  r.health = draining_ ? "draining" : "ok";
  r.started_at = started_at_;
  r.sessions = static_cast<uint32_t>(sessions_.size());
  for (const auto& [name, t] : tenants_) {
    pool::ServerRecord::TenantHere here;
    for (const GpuInfo& g : inventory_.gpus) here.used += ledger_->Tenant(t.ledger_index, static_cast<uint32_t>(g.index)).used;
    for (const auto& [pid, s] : sessions_) here.sessions += s.tenant == name;
    if (here.used != 0 || here.sessions != 0) r.tenants[name] = here;
  }
  return r;
}

void Supervisor::ApplyPool(const pool::PoolView& view, bool fresh) {
  pool_applied_ = true;
  // This server's GPUs of each tenant, by the pool's assignments.
  std::map<std::string, std::vector<int>> gpus_of;
  for (const pool::Assignment& a : view.assignments) {
    if (a.server != pool_name_) continue;
    for (const GpuInfo& g : inventory_.gpus)
      if (g.uuid == a.uuid) gpus_of[a.tenant].push_back(g.index);
  }
  for (const auto& [name, rec] : view.tenants) {
    std::vector<int> gpus = gpus_of[name];
    std::sort(gpus.begin(), gpus.end());
    gpus.erase(std::unique(gpus.begin(), gpus.end()), gpus.end());
    std::vector<std::string> uuids;
    for (int g : gpus) uuids.push_back(inventory_.gpus[static_cast<size_t>(g)].uuid);
    auto it = tenants_.find(name);
    if (it == tenants_.end()) {
      TenantState t;
      auto index = ledger_->AddTenant(name);
      if (!index.ok()) {
        LOG_ERROR("pool: tenant '{}' cannot be served here: {}", name, index.status().message());
        continue;
      }
      t.ledger_index = *index;
      t.record = rec;
      t.record.gpu_uuids = uuids;
      t.gpus = gpus;
      (void)ApplyLimit(t);
      // A pool-limited tenant starts with no share here: its first allocation borrows.
      (void)ledger_->SetTotalLimit(t.ledger_index, rec.pool_limit ? 0 : kUnlimited);
      compute_.board().AddTenant(t.ledger_index, t.record.compute);
      LOG_INFO("pool: tenant '{}' (memory limit {} per GPU, {} across the pool, GPUs here [{}])", name,
               rec.memory_limit ? FormatSize(*rec.memory_limit) : "unlimited",
               rec.pool_limit ? FormatSize(*rec.pool_limit) : "unlimited", fmt::join(gpus, ","));
      std::lock_guard<std::mutex> lock(tenants_mu_);
      tenants_.emplace(name, std::move(t));
      continue;
    }
    TenantState& t = it->second;
    bool limit_changed = t.record.memory_limit != rec.memory_limit;
    bool pool_changed = t.record.pool_limit.has_value() != rec.pool_limit.has_value();
    bool compute_changed = !(t.record.compute == rec.compute);
    {
      std::lock_guard<std::mutex> lock(tenants_mu_);  // handshakes read the verifiers
      t.record.stored_key = rec.stored_key;
      t.record.server_key = rec.server_key;
      t.record.memory_limit = rec.memory_limit;
      t.record.pool_limit = rec.pool_limit;
      t.record.compute = rec.compute;
      t.record.created_at = rec.created_at;
      t.record.gpu_uuids = uuids;
    }
    if (limit_changed) (void)ApplyLimit(t);
    // Limited from now on: no share yet (its use so far counts against the next borrow).
    if (pool_changed) (void)ledger_->SetTotalLimit(t.ledger_index, rec.pool_limit ? 0 : kUnlimited);
    if (compute_changed) compute_.board().SetTenant(t.ledger_index, rec.compute);
    if (t.gpus != gpus) {
      LOG_INFO("pool: tenant '{}' GPUs here [{}] (were [{}])", name, fmt::join(gpus, ","), fmt::join(t.gpus, ","));
      t.gpus = gpus;
      PushGpus(name);
    }
  }
  std::vector<std::string> gone;
  for (const auto& [name, t] : tenants_)
    if (!view.tenants.count(name)) gone.push_back(name);
  for (const std::string& name : gone) {
    ForgetTenant(name);
    LOG_INFO("pool: tenant '{}' was deleted from the pool", name);
  }
  UpdateComputeEnforcement();
  LOG_DEBUG("pool: applied revision {}{}", view.revision, fresh ? "" : " (from the mirror's copy)");
}

void Supervisor::PoolFence(const std::string& why) {
  pool_lease_ = 0;
  std::vector<pid_t> holding;
  for (auto& [name, t] : tenants_) {
    if (!t.record.pool_limit) continue;
    (void)ledger_->SetTotalLimit(t.ledger_index, 0);
    for (const auto& [pid, s] : sessions_) {
      if (s.tenant != name) continue;
      uint64_t held = 0;
      for (uint32_t g = 0; g < kLedgerMaxGpus; g++) held += ledger_->SessionUsed(s.ledger_slot, g);
      if (held != 0) holding.push_back(pid);
    }
  }
  // Their memory counted against shares the pool may now give to other servers.
  for (pid_t pid : holding)
    EndSessionNow(pid, "this Remora server lost its place in the pool (" + why +
                           "): the memory the session held may be given to other servers");
  if (!holding.empty()) LOG_WARN("pool: {} session(s) holding memory of pool-limited tenants ended", holding.size());
}

void Supervisor::AnswerWorker(pid_t pid, uint64_t request, uint32_t status) {
  auto it = sessions_.find(pid);
  if (it == sessions_.end()) return;
  Status st = SendControl(it->second, [&](void* m) {
    auto r = static_cast<control::ControlMessage::Builder*>(m)->initIpcReply();
    r.setRequestId(request);
    r.setStatus(status);
  });
  if (!st.ok()) LOG_DEBUG("session {}: cannot answer its worker: {}", it->second.id, st.message());
}

void Supervisor::OnQuotaBorrow(pid_t pid, uint64_t request, uint64_t bytes) {
  const SessionState& s = sessions_.at(pid);
  auto t = tenants_.find(s.tenant);
  if (!pool_ || t == tenants_.end() || !t->second.record.pool_limit) {
    AnswerWorker(pid, request, kCuOutOfMemory);
    return;
  }
  uint64_t id = s.id;
  pool_->Borrow(s.tenant, bytes, [this, pid, request, id](Status st) {
    if (!st.ok()) LOG_INFO("session {}: {}", id, st.message());
    Post([this, pid, request, ok = st.ok()] { AnswerWorker(pid, request, ok ? 0 : kCuOutOfMemory); });
  });
}

std::vector<std::pair<std::string, uint32_t>> Supervisor::PoolLocate(const std::string& tenant) {
  std::vector<std::pair<std::string, uint32_t>> out;
  if (!pool_) return out;
  pool::PoolView v = pool_->View();
  for (const pool::Assignment& a : v.AssignmentsOf(tenant)) {
    auto s = v.servers.find(a.server);
    if (s == v.servers.end() || s->second.urls.empty()) continue;  // gone from the pool
    const std::string& url = s->second.urls.front();
    auto e = std::find_if(out.begin(), out.end(), [&](const auto& x) { return x.first == url; });
    if (e == out.end()) out.emplace_back(url, 1);
    else e->second++;
  }
  return out;
}

void Supervisor::OnLocate(PendingConnection& conn, const AuthenticatedPeer& peer) {
  FrameSocket fs(conn.socket.get());
  if (!pool_) {
    (void)SendRefusal(fs, Err::kInvalidValue, "this Remora server is not part of a pool: name it without pool://");
    return;
  }
  SessionInfo info;
  info.tenant = peer.tenant;
  info.backend = inventory_.backend;
  info.emulated = inventory_.emulated;
  info.server_name = pool_name_;
  info.pool_servers = PoolLocate(peer.tenant);
  if (info.pool_servers.empty()) {
    (void)SendRefusal(fs, Err::kNoDevice, fmt::format("tenant '{}' has no GPU on a live server of the pool", peer.tenant));
    return;
  }
  if (Status st = SendWelcome(fs, peer, info); !st.ok()) LOG_DEBUG("locate: {}", st.message());
  LOG_DEBUG("tenant '{}' located its GPUs from {}@{}", peer.tenant, peer.client.user, peer.client.hostname);
}

}  // namespace remora::server
