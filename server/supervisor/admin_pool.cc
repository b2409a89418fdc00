#include "supervisor/admin_pool.h"

#include <algorithm>
#include <ctime>
#include <set>

#include "pool/pool_admin.h"
#include "pool/pool_agent.h"
#include "remora/base/log.h"
#include "remora/base/util.h"
#include "remora/protocol/auth.h"
#include "supervisor/supervisor.h"

namespace remora::server::admin_pool {
namespace {

// Waits until every live server applied `revision`; a server that has not is logged (the
// change is made, and takes effect there once it reaches the store).
void AwaitServers(Supervisor& sup, int64_t revision) {
  Status st = sup.pool_admin()->WaitApplied(revision, {}, kApplyWaitMs);
  if (!st.ok()) LOG_WARN("pool: {}", st.message());
}

Status Done(Supervisor& sup, const Result<int64_t>& r) {
  if (!r.ok()) return r.status();
  AwaitServers(sup, *r);
  return Status::Ok();
}

}  // namespace

Result<std::string> CreateTenant(Supervisor& sup, const std::string& name, std::optional<uint64_t> memory_limit,
                                 const std::vector<int>& gpus, std::optional<uint64_t> pool_limit) {
  RETURN_IF_ERROR(ValidateTenantName(name));
  Token token{name, RandomSecret()};
  Verifier v = VerifierFor(token.secret);
  pool::PoolTenant t;
  t.name = name;
  t.stored_key = v.stored_key;
  t.server_key = v.server_key;
  t.memory_limit = memory_limit;
  t.pool_limit = pool_limit;
  t.created_at = static_cast<int64_t>(std::time(nullptr));
  ASSIGN_OR_RETURN(int64_t revision, sup.pool_admin()->CreateTenant(t));
  for (int g : gpus) {
    auto r = sup.pool_admin()->Attach(name, sup.pool_name(), g);
    if (!r.ok()) {
      (void)sup.pool_admin()->DeleteTenant(name);  // all or nothing
      return r.status();
    }
    revision = *r;
  }
  AwaitServers(sup, revision);
  LOG_INFO("pool: tenant '{}' created (memory limit {} per GPU, {} across the pool)", name,
           memory_limit ? FormatSize(*memory_limit) : "unlimited", pool_limit ? FormatSize(*pool_limit) : "unlimited");
  return FormatToken(token);
}

Status DeleteTenant(Supervisor& sup, const std::string& name, bool force) {
  if (!force) {
    ASSIGN_OR_RETURN(pool::PoolView v, sup.pool_admin()->View());
    uint32_t sessions = 0;
    for (const auto& [server, r] : v.servers)
      if (auto t = r.tenants.find(name); t != r.tenants.end()) sessions += t->second.sessions;
    if (sessions != 0)
      return Error(Err::kNotPermitted, "tenant '{}' has {} running session(s) in the pool; use --force to end them", name,
                   sessions);
  }
  RETURN_IF_ERROR(Done(sup, sup.pool_admin()->DeleteTenant(name)));
  LOG_INFO("pool: tenant '{}' deleted", name);
  return Status::Ok();
}

Status SetMemoryLimit(Supervisor& sup, const std::string& name, std::optional<uint64_t> limit) {
  return Done(sup, sup.pool_admin()->UpdateTenant(name, [&](pool::PoolTenant& t) {
    t.memory_limit = limit;
    return Status::Ok();
  }));
}

Status SetPoolLimit(Supervisor& sup, const std::string& name, std::optional<uint64_t> limit) {
  return Done(sup, sup.pool_admin()->UpdateTenant(name, [&](pool::PoolTenant& t) {
    t.pool_limit = limit;
    return Status::Ok();
  }));
}

Status SetCompute(Supervisor& sup, const std::string& name, const sched::ComputeSettings& settings) {
  RETURN_IF_ERROR(CheckComputeSettings(settings));
  return Done(sup, sup.pool_admin()->UpdateTenant(name, [&](pool::PoolTenant& t) {
    t.compute = settings;
    return Status::Ok();
  }));
}

Status Attach(Supervisor& sup, const std::string& name, int gpu) {
  return Done(sup, sup.pool_admin()->Attach(name, sup.pool_name(), gpu));
}

Status Assign(Supervisor& sup, const std::string& tenant, const std::string& server, int gpu) {
  ASSIGN_OR_RETURN(int64_t revision, sup.pool_admin()->Attach(tenant, server, gpu));
  Status st = sup.pool_admin()->WaitApplied(revision, {server}, kApplyWaitMs);
  if (!st.ok()) LOG_WARN("pool: {}", st.message());
  return Status::Ok();
}

Status Detach(Supervisor& sup, const std::string& name, int gpu) {
  if (gpu < 0) return Error(Err::kInvalidValue, "no GPU {} on this server", gpu);
  int n = 0;
  return Detach(sup, name, sup.pool_name(), gpu, &n);
}

Status Detach(Supervisor& sup, const std::string& tenant, const std::string& server, int gpu, int* detached) {
  ASSIGN_OR_RETURN(auto r, sup.pool_admin()->Detach(tenant, server, gpu));
  *detached = r.second;
  AwaitServers(sup, r.first);
  return Status::Ok();
}

Status Place(Supervisor& sup, admin::rpc::Admin::PoolAttachParams::Reader in, admin::rpc::Admin::PoolAttachResults::Builder out) {
  pool::PlacementRequest req;
  req.tenant = in.getTenant();
  req.count = in.getCount();
  if (in.getPolicy().size() != 0) {
    ASSIGN_OR_RETURN(req.policy, pool::ParsePlacementPolicy(std::string(in.getPolicy())));
  }
  req.model = in.getModel();
  req.min_free_memory = in.getMinFreeMemory();
  for (auto s : in.getServers()) req.servers.emplace_back(s);
  ASSIGN_OR_RETURN(auto placed, sup.pool_admin()->Place(req));
  std::set<std::string> servers;
  for (const pool::Assignment& a : placed.second) servers.insert(a.server);
  Status st = sup.pool_admin()->WaitApplied(placed.first, {servers.begin(), servers.end()}, kApplyWaitMs);
  if (!st.ok()) LOG_WARN("pool: {}", st.message());
  auto list = out.initPlaced(static_cast<unsigned>(placed.second.size()));
  for (size_t i = 0; i < placed.second.size(); i++) {
    const pool::Assignment& a = placed.second[i];
    auto b = list[static_cast<unsigned>(i)];
    b.setTenant(a.tenant);
    b.setServer(a.server);
    b.setGpu(a.gpu);
    b.setUuid(a.uuid);
  }
  LOG_INFO("pool: {} GPU(s) placed for tenant '{}' ({})", placed.second.size(), req.tenant,
           pool::PlacementPolicyName(req.policy));
  return Status::Ok();
}

Status FillInfo(Supervisor& sup, admin::rpc::PoolInfo::Builder out) {
  pool::PoolAgent& agent = *sup.pool_agent();
  bool fresh = true;
  auto read = sup.pool_admin()->View();
  pool::PoolView v = read.ok() ? std::move(*read) : agent.View();
  if (!read.ok()) fresh = false;
  out.setName(sup.pool_name());
  const auto& eps = sup.options().pool;
  auto el = out.initEndpoints(static_cast<unsigned>(eps.size()));
  for (size_t i = 0; i < eps.size(); i++) el.set(static_cast<unsigned>(i), eps[i]);
  out.setPrefix(sup.options().pool_prefix);
  out.setRevision(v.revision);
  out.setFresh(fresh);
  out.setRegistered(agent.lease() != 0);
  auto sl = out.initServers(static_cast<unsigned>(v.servers.size()));
  unsigned i = 0;
  for (const auto& [name, s] : v.servers) {
    auto b = sl[i++];
    b.setName(name);
    auto ul = b.initUrls(static_cast<unsigned>(s.urls.size()));
    for (size_t j = 0; j < s.urls.size(); j++) ul.set(static_cast<unsigned>(j), s.urls[j]);
    b.setBackend(s.backend);
    b.setEmulated(s.emulated);
    b.setVersion(s.version);
    b.setHealth(s.health);
    b.setStartedAt(s.started_at);
    b.setUpdatedAt(s.updated_at);
    b.setSessions(s.sessions);
    b.setAppliedRevision(v.applied.count(name) ? v.applied.at(name) : 0);
  }
  // GPUs: every live server's, then the assigned GPUs of servers that left.
  struct Row {
    std::string server, uuid, name;
    int index = 0;
    uint64_t total = 0, used = 0;
    std::vector<std::string> tenants;
    bool gone = false;
  };
  std::vector<Row> rows;
  for (const auto& [name, s] : v.servers)
    for (const pool::PoolGpu& g : s.gpus) rows.push_back({name, g.uuid, g.name, g.index, g.total_memory, g.used, {}, false});
  for (const pool::Assignment& a : v.assignments) {
    auto r = std::find_if(rows.begin(), rows.end(), [&](const Row& x) { return x.server == a.server && x.uuid == a.uuid; });
    if (r == rows.end()) {
      rows.push_back({a.server, a.uuid, "", a.gpu, 0, 0, {}, true});
      r = rows.end() - 1;
    }
    r->tenants.push_back(a.tenant);
  }
  auto gl = out.initGpus(static_cast<unsigned>(rows.size()));
  for (size_t j = 0; j < rows.size(); j++) {
    auto b = gl[static_cast<unsigned>(j)];
    b.setServer(rows[j].server);
    b.setIndex(rows[j].index);
    b.setUuid(rows[j].uuid);
    b.setName(rows[j].name);
    b.setTotalMemory(rows[j].total);
    b.setUsed(rows[j].used);
    b.setGone(rows[j].gone);
    auto tl = b.initTenants(static_cast<unsigned>(rows[j].tenants.size()));
    for (size_t k = 0; k < rows[j].tenants.size(); k++) tl.set(static_cast<unsigned>(k), rows[j].tenants[k]);
  }
  auto tl = out.initTenants(static_cast<unsigned>(v.tenants.size()));
  i = 0;
  for (const auto& [name, t] : v.tenants) {
    auto b = tl[i++];
    b.setName(name);
    b.setHasLimit(t.memory_limit.has_value());
    b.setMemoryLimit(t.memory_limit.value_or(0));
    b.setHasPoolLimit(t.pool_limit.has_value());
    b.setPoolLimit(t.pool_limit.value_or(0));
    b.setShares(v.SharesOf(name));
    b.setGpus(static_cast<uint32_t>(v.AssignmentsOf(name).size()));
    std::vector<std::tuple<std::string, uint64_t, uint32_t, uint64_t>> here;
    uint64_t used = 0;
    uint32_t sessions = 0;
    std::set<std::string> names;
    for (const auto& [server, s] : v.servers)
      if (s.tenants.count(name)) names.insert(server);
    if (auto sh = v.shares.find(name); sh != v.shares.end())
      for (const auto& [server, bytes] : sh->second) names.insert(server);
    for (const std::string& server : names) {
      pool::ServerRecord::TenantHere th;
      if (auto s = v.servers.find(server); s != v.servers.end() && s->second.tenants.count(name)) th = s->second.tenants.at(name);
      uint64_t share = 0;
      if (auto sh = v.shares.find(name); sh != v.shares.end() && sh->second.count(server)) share = sh->second.at(server);
      here.emplace_back(server, th.used, th.sessions, share);
      used += th.used;
      sessions += th.sessions;
    }
    b.setUsed(used);
    b.setSessions(sessions);
    auto hl = b.initServers(static_cast<unsigned>(here.size()));
    for (size_t j = 0; j < here.size(); j++) {
      auto h = hl[static_cast<unsigned>(j)];
      h.setServer(std::get<0>(here[j]));
      h.setUsed(std::get<1>(here[j]));
      h.setSessions(std::get<2>(here[j]));
      h.setShare(std::get<3>(here[j]));
    }
  }
  auto al = out.initAssignments(static_cast<unsigned>(v.assignments.size()));
  for (size_t j = 0; j < v.assignments.size(); j++) {
    const pool::Assignment& a = v.assignments[j];
    auto b = al[static_cast<unsigned>(j)];
    b.setTenant(a.tenant);
    b.setServer(a.server);
    b.setGpu(a.gpu);
    b.setUuid(a.uuid);
    b.setGone(!v.servers.count(a.server));
  }
  return Status::Ok();
}

}  // namespace remora::server::admin_pool
